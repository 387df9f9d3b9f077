#!/usr/bin/env bash
# Issue 13, session 19: cache hints and GROUP_M in nhwc_igemm on the channels_last rows under 0.9x
# (benchmarks/probe_nhwc_hints.py). Log under $OUT.
set -uo pipefail
source benchmarks/gpu_env.sh
step "python3 benchmarks/probe_nhwc_hints.py"
timeout 400 python3 benchmarks/probe_nhwc_hints.py 2>&1 | tee "$OUT/probe_nhwc_hints.txt" | tail -40
