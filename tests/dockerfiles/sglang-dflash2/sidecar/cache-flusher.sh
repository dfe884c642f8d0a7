#!/bin/sh
echo flusher
