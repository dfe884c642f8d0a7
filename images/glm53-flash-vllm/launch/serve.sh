#!/bin/sh
# Serve GLM-5.3-Flash TP2 across two Sparks. The block size is not optional on GB10: the hybrid
# block aligner's choice tiles kpool storage by 32, DeepGEMM's arch-12 fp8 paged-MQA needs 64.
set -eu
exec vllm serve "${GLM53_MODEL:-RedHatAI/GLM-5.3-Flash-NVFP4}" \
    --tensor-parallel-size "${GLM53_TENSOR_PARALLEL}" \
    --block-size "${GLM53_BLOCK_SIZE}" \
    --max-model-len "${GLM53_MAX_MODEL_LEN}" \
    --kv-cache-dtype "${GLM53_KV_CACHE_DTYPE:-auto}" \
    --gpu-memory-utilization "${GLM53_GPU_MEMORY_UTILIZATION:-0.85}" \
    --speculative-config '{"method": "mtp", "num_speculative_tokens": 4}' \
    --tool-call-parser glm47 --reasoning-parser glm45 "$@"
