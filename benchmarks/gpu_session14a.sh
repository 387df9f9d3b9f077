#!/usr/bin/env bash
# Session 14, first GPU call: L1 #50 folded, with a K step along a whole row of taps (benchmarks/probe_fold_rows.py;
# its docstring has the prediction). Logs under $OUT.
set -uo pipefail
source benchmarks/gpu_env.sh
step "python3 benchmarks/probe_fold_rows.py"
timeout 570 python3 benchmarks/probe_fold_rows.py 2>&1 | tee "$OUT/h200_issue13_fold_rows.txt"
