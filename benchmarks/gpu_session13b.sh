#!/usr/bin/env bash
# Session 13, second GPU call: nhwc_igemm with its A tiles rounded in the kernel against an input rounded
# beforehand, over a grid of configurations per stride-1 layer, then each way's best on both input layouts' routes
# next to cuDNN (benchmarks/probe_prerounded.py --grid). Logs under $OUT.
set -uo pipefail
source benchmarks/gpu_env.sh
G='BM=64,128;BN=128,256;BK=32;W=4,8;S=3,4'
step "python3 benchmarks/probe_prerounded.py --grid '$G'"
timeout 560 python3 benchmarks/probe_prerounded.py --grid "$G" \
  --problems alexnet_conv4,alexnet_conv3,alexnet_conv5,vgg16_conv3_2,resnet50_layer2_3x3,alexnet_conv2 2>&1 \
  | tee "$OUT/prerounded_grid.txt" | grep -v "^ *%" | tail -150
