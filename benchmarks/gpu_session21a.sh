#!/usr/bin/env bash
# Issue 13, session 21: fused_gluon with each gathered A operand feeding two or three output rows
# (benchmarks/probe_fused_window.py):
# its L1 #50 output against the library's bit for bit and against torch by the judge's allclose, random family problems
# against the library's output, and the timing of each variant next to the library's call; then the TF32 wgmma rate
# by operand source, N and MMAs a wait (benchmarks/probe_wgmma_rate.py). Logs under $OUT.
set -uo pipefail
source benchmarks/gpu_env.sh
step "python3 benchmarks/probe_fused_window.py --cases 40"
timeout 330 python3 benchmarks/probe_fused_window.py --cases 40 2>&1 | tee "$OUT/probe.txt" | grep -v Warning
step "python3 benchmarks/probe_wgmma_rate.py"
timeout 220 python3 benchmarks/probe_wgmma_rate.py 2>&1 | tee "$OUT/wgmma_rate.txt" | grep -v Warning
