#!/usr/bin/env bash
# Issue 13, session 28: nhwc_igemm with fewer instructions a K step on the channels_last pins, side by side with the
# library's kernel and cuDNN channels_last (benchmarks/probe_nhwc_mask.py). Logs under $OUT.
set -uo pipefail
source benchmarks/gpu_env.sh
step "python3 benchmarks/probe_nhwc_mask.py"
timeout 400 python3 benchmarks/probe_nhwc_mask.py 2>&1 | grep -v Warning | tee "$OUT/probe_nhwc_mask.txt"
