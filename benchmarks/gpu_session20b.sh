#!/usr/bin/env bash
# Issue 13, session 20: nchw_igemm in the library, the GPU correctness command on it: its random-problem script and
# convtune.verify on 300 random cases of its family. Logs under $OUT.
set -uo pipefail
source benchmarks/gpu_env.sh
step "python3 tests/gpu_scripts/nchw_igemm.py"
timeout 380 python3 tests/gpu_scripts/nchw_igemm.py 2>&1 | tail -25
step "python3 -m convtune.verify --variants nchw_igemm --shapes 300 --workers 15 --max-seconds 150"
timeout 200 python3 -m convtune.verify --variants nchw_igemm --shapes 300 --workers 15 --max-seconds 150 2>&1 \
  | grep -E "^FAIL|^\||failure|verify:|error" | cut -c1-400
