#!/usr/bin/env bash
# Issue 13, session 19: cache hints in fused_gluon's loads and stores on L1 #50 (benchmarks/probe_fused_gluon_hints.py),
# each variant checked bit for bit against the library's call and timed beside it. Log under $OUT.
set -uo pipefail
source benchmarks/gpu_env.sh
step "python3 benchmarks/probe_fused_gluon_hints.py"
timeout 500 python3 benchmarks/probe_fused_gluon_hints.py ${PROBE_ARGS:-} 2>&1 | tee "$OUT/probe_fused_gluon_hints.txt" | tail -30
