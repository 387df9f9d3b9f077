#!/usr/bin/env bash
# Issue 13, session 19: a stride-1 convolution read straight from NCHW through 4-D TMA tiles into a register-A MMA
# (benchmarks/probe_nchw_tma.py), on the shapes named in PROBE_ARGS (--shapes), next to cuDNN and our nhwc kernels.
# Log under $OUT.
set -uo pipefail
source benchmarks/gpu_env.sh
step "python3 benchmarks/probe_nchw_tma.py ${PROBE_ARGS:-}"
timeout 560 python3 benchmarks/probe_nchw_tma.py ${PROBE_ARGS:-} 2>&1 | grep -v "OutOfResources" \
  | tee "$OUT/probe_nchw_tma.txt" | tail -60
