#!/usr/bin/env bash
# Session 14, fourth GPU call: where fold_igemm in the library loses 0.1 ms against its probe on L1 #50
# (benchmarks/probe_fold_library.py). Logs under $OUT.
set -uo pipefail
source benchmarks/gpu_env.sh
step "python3 benchmarks/probe_fold_library.py"
timeout 300 python3 benchmarks/probe_fold_library.py 2>&1 | tee "$OUT/h200_issue13_fold_library.txt" | tail -30
