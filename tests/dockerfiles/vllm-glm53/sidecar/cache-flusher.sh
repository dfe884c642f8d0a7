#!/bin/sh
echo flusher ok
