#!/usr/bin/env bash
# Issue 13, session 28: nchw_igemm with fewer mask instructions a K step and its stores evict_first, side by side with
# the library's kernel and cuDNN in both layouts (benchmarks/probe_nchw_mask.py). Logs under $OUT.
set -uo pipefail
source benchmarks/gpu_env.sh
step "python3 benchmarks/probe_nchw_mask.py"
timeout 500 python3 benchmarks/probe_nchw_mask.py 2>&1 | grep -v Warning | tee "$OUT/probe_nchw_mask.txt"
