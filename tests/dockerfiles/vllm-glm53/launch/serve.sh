#!/bin/sh
exec vllm serve "$@"
