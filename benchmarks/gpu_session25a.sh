#!/usr/bin/env bash
# Issue 13, session 25: the NCHW route's copy to channels_last hidden behind the convolution in chunks of images
# (benchmarks/probe_overlap.py: copies on a stream of their own, convolutions after each chunk's copy), next to the
# library's route and cuDNN in both layouts, on the four NCHW keys whose pins run an nhwc kernel. Log under $OUT.
set -uo pipefail
source benchmarks/gpu_env.sh
step "python3 benchmarks/probe_overlap.py"
timeout 400 python3 benchmarks/probe_overlap.py 2>&1 | tee "$OUT/probe_overlap.txt" | grep -v Warning
