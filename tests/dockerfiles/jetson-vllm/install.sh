#!/usr/bin/env bash
set -ex
apt-get update -y
apt-get install -y --no-install-recommends libnuma-dev libsndfile1
rm -rf /var/lib/apt/lists/*
if [ "$FORCE_BUILD" == "on" ]; then
	echo "Forcing build of vllm ${VLLM_VERSION}"
	exit 1
fi
uv pip install compressed-tensors xgrammar vllm==${VLLM_VERSION}+${CUDA_SUFFIX}
