#!/bin/sh
exec python3 -m vllm.entrypoints.openai.api_server --port 8080 "$@"
