#!/usr/bin/env bash
# Issue 13, session 20: a stride-1 convolution read straight from NCHW with its input tiles as the MMA's register
# operand (benchmarks/probe_nchw_direct.py), on the suite's six stride-1 layers with a spatial kernel, each
# configuration checked against the exact sum and torch's allclose, next to cuDNN in both layouts and the library's
# current paths; then the input tiles through TMA, in a process of its own (a fault there ends the process). Log
# under $OUT.
set -uo pipefail
source benchmarks/gpu_env.sh
step "python3 benchmarks/probe_nchw_direct.py ${PROBE_ARGS:-}"
timeout 400 python3 benchmarks/probe_nchw_direct.py ${PROBE_ARGS:-} 2>&1 | grep -v "^\s*$" | tee "$OUT/probe_nchw_direct.txt" | tail -120
step "python3 benchmarks/probe_nchw_direct.py --tma ${TMA_ARGS:-}"
timeout 150 python3 benchmarks/probe_nchw_direct.py --tma ${TMA_ARGS:-} 2>&1 | grep -v "^\s*$" | tee "$OUT/probe_nchw_direct_tma.txt" | tail -60
