#!/usr/bin/env bash
# Issue 13, session 27: alexnet_conv4/conv3 with 256-wide tiles over 256 channels and 128-wide ones over the rest
# (benchmarks/probe_mixed.py: one launch of two tile kinds, or two launches on two streams), next to the pin, nhwc_preround
# and cuDNN, side by side in one process. Logs under $OUT.
set -uo pipefail
source benchmarks/gpu_env.sh
step "python3 benchmarks/probe_mixed.py --problems alexnet_conv4"
timeout 300 python3 benchmarks/probe_mixed.py --problems alexnet_conv4 2>&1 | grep -v Warning | tee "$OUT/probe_mixed_conv4.txt"
step "python3 benchmarks/probe_mixed.py --problems alexnet_conv3"
timeout 200 python3 benchmarks/probe_mixed.py --problems alexnet_conv3 2>&1 | grep -v Warning | tee "$OUT/probe_mixed_conv3.txt"
