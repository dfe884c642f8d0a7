#!/usr/bin/env bash
set -ex
git clone --branch=${VLLM_BRANCH} --recursive --depth=1 https://github.com/vllm-project/vllm /opt/vllm
cd /opt/vllm && python3 use_existing_torch.py
MAX_JOBS=$(nproc) uv build --wheel --no-build-isolation -v --out-dir /opt/vllm/wheels .
uv pip install /opt/vllm/wheels/vllm*.whl
