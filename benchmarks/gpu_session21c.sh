#!/usr/bin/env bash
# Issue 13, session 21: the three-row fused_gluon variant with its next folded rows prefetched into L1 as well as L2
# (benchmarks/probe_fused_window.py --l1; NCU had its gathers hitting L1 39 % of the time, the library's 84 %, and
# waits on them first among its stalls). Each variant's output against the library's and the judge's allclose, and
# its time next to the library's call. Log under $OUT.
set -uo pipefail
source benchmarks/gpu_env.sh
step "python3 benchmarks/probe_fused_window.py --l1"
timeout 300 python3 benchmarks/probe_fused_window.py --l1 2>&1 | tee "$OUT/l1.txt" | grep -v Warning
