#!/usr/bin/env bash
# Issue 13, session 23: benchmarks/probe_split.py: nhwc_igemm's split last wave against the same kernel unsplit and the
# kernel before the change (benchmarks/nhwc_before.py), side by side, then the library's NCHW route. Log under $OUT.
set -uo pipefail
source benchmarks/gpu_env.sh
step "python3 benchmarks/probe_split.py"
timeout 420 python3 benchmarks/probe_split.py --points 3 --problems alexnet_conv5,alexnet_conv4,alexnet_conv3,resnet50_layer2_3x3,alexnet_conv2 2>&1 | tee "$OUT/split.txt" | grep -v Warning
