#!/usr/bin/env bash
# Issue 13, session 28: the weight tiles by TMA or by plain loads on the rows under 0.9x cuDNN (resnet50_layer2_3x3 in
# both layouts, vgg16_conv3_2 NCHW), side by side with cuDNN in one process (benchmarks/probe_weight_path.py). Logs under $OUT.
set -uo pipefail
source benchmarks/gpu_env.sh
step "python3 benchmarks/probe_weight_path.py"
timeout 500 python3 benchmarks/probe_weight_path.py 2>&1 | grep -v Warning | tee "$OUT/probe_weight_path.txt"
