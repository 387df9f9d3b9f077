#!/usr/bin/env bash
# Session 16, first GPU call: Triton's warp specialisation (autoWS) and persistent grids on fold_igemm's convolution,
# and the kernel rows' K padding (benchmarks/probe_fold_ws.py), then A through registers and persistent grids with
# host-side descriptors (benchmarks/probe_fold_areg.py); predictions in their docstrings. Logs under $OUT.
# The session ran the first probe alone (before the second was written), then `bash gpu_session16a.sh areg`.
set -uo pipefail
source benchmarks/gpu_env.sh
[ "${1:-}" = areg ] || { step "python3 benchmarks/probe_fold_ws.py"
timeout 500 python3 benchmarks/probe_fold_ws.py 2>&1 | tee $OUT/probe_fold_ws.txt | tail -40; }
step "python3 benchmarks/probe_fold_areg.py"
timeout 500 python3 benchmarks/probe_fold_areg.py 2>&1 | tee $OUT/probe_fold_areg.txt | grep -v "^ *%\|^ *tt\.\|^ *scf\|^ *}\|^ *arith\|^#\|^ *ttg\|^ *ttng" | tail -60
