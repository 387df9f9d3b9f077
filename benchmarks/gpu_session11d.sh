#!/usr/bin/env bash
# Session 11, fourth GPU call: the GPU tests with this session's library (channels_last calls on nhwc_igemm,
# implicit_gemm writing channels_last outputs). Logs under $OUT.
set -uo pipefail
source benchmarks/gpu_env.sh
step "python3 -m pytest -q tests/test_gpu.py"
timeout 560 python3 -m pytest -q -p no:cacheprovider tests/test_gpu.py 2>&1 | tail -15
