#!/usr/bin/env bash
# Issue 13, session 22: fused_gluon with the window in the library (kernels/fused_gluon_kernel._window). The GPU
# correctness command on it (its random-family script, bit for bit against fold_igemm; convtune.verify on 300 random
# cases of its family), then benchmarks/check_fused_window.py (its binaries' MMA waits, and its L1 #50 calls next to
# fold_igemm and cuDNN). Logs under $OUT.
set -uo pipefail
source benchmarks/gpu_env.sh
step "python3 tests/gpu_scripts/fused_gluon.py"
timeout 200 python3 tests/gpu_scripts/fused_gluon.py 2>&1 | tee "$OUT/gpu_script.txt" | tail -8
step "python3 -m convtune.verify --variants fused_gluon --shapes 300 --workers 15 --max-seconds 100"
timeout 150 python3 -m convtune.verify --variants fused_gluon --shapes 300 --workers 15 --max-seconds 100 2>&1 \
  | tee "$OUT/verify.txt" | grep -E "^FAIL|^\||failure|verify:|error" | cut -c1-300
step "python3 benchmarks/check_fused_window.py"
timeout 180 python3 benchmarks/check_fused_window.py 2>&1 | tee "$OUT/check.txt" | grep -v Warning
