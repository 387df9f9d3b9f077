#!/usr/bin/env bash
# Session 13, seventh GPU call: the GPU tests (tests/test_gpu.py) with nhwc_preround in the library and the pins
# gpu_session13d.sh promoted. Logs under $OUT.
set -uo pipefail
source benchmarks/gpu_env.sh
step "python3 -m pytest -q tests/test_gpu.py"
timeout 580 python3 -m pytest -q -p no:cacheprovider tests/test_gpu.py 2>&1 | tail -15
