#!/usr/bin/env bash
# Session 12, fifth GPU call: the GPU tests with this session's library (pins that name their kernel, our NCHW ->
# channels_last copy). Logs under $OUT.
set -uo pipefail
source benchmarks/gpu_env.sh
step "python3 -m pytest -q tests/test_gpu.py"
timeout 580 python3 -m pytest -q -p no:cacheprovider tests/test_gpu.py 2>&1 | tail -15
