#!/usr/bin/env bash
# Issue 13, session 19: nchw_1x1 in the library, the GPU correctness command on it: its random-problem script and
# convtune.verify on 300 random cases of its family. Logs under $OUT.
set -uo pipefail
source benchmarks/gpu_env.sh
step "python3 tests/gpu_scripts/nchw_1x1.py"
timeout 330 python3 tests/gpu_scripts/nchw_1x1.py 2>&1 | tail -25
step "python3 -m convtune.verify --variants nchw_1x1 --shapes 300 --workers 15 --max-seconds 150"
timeout 220 python3 -m convtune.verify --variants nchw_1x1 --shapes 300 --workers 15 --max-seconds 150 2>&1 \
  | grep -E "^FAIL|^\||failure|verify:|error" | cut -c1-400
