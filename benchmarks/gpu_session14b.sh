#!/usr/bin/env bash
# Session 14, second GPU call: L1 #50 folded, both operands through TMA, then persistent
# (benchmarks/probe_fold_tma.py; its docstring has the prediction). Logs under $OUT.
set -uo pipefail
source benchmarks/gpu_env.sh
step "python3 benchmarks/probe_fold_tma.py"
timeout 570 python3 benchmarks/probe_fold_tma.py 2>&1 | tee "$OUT/h200_issue13_fold_tma.txt"
