#!/usr/bin/env bash
# Session 13, eleventh GPU call: the GPU tests (tests/test_gpu.py, the bound-launch test included) at ea14496, with
# the bound nhwc launches and the pins gpu_session13i/13j promoted. Logs under $OUT.
set -uo pipefail
source benchmarks/gpu_env.sh
step "python3 -m pytest -q tests/test_gpu.py"
timeout 590 python3 -m pytest -q -p no:cacheprovider tests/test_gpu.py 2>&1 | tail -15
