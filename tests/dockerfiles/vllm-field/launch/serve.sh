#!/bin/sh
# launch vLLM with the settings the image carries
exec vllm serve /models/glm53 --block-size "$VLLM_BLOCK_SIZE" "$@"
