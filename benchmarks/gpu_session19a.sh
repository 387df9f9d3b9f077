#!/usr/bin/env bash
# Issue 13, session 19: a 1×1 convolution read straight from NCHW as a batched GEMM (benchmarks/probe_pointwise.py):
# two operand orders, masked loads or TMA, a grid of tiles on resnet50_layer1_1x1 and a few tiles on ResNet-50's
# other 1×1 shapes, each checked against the exact sum and torch's allclose, next to cuDNN in both layouts and
# implicit_gemm. Log under $OUT.
set -uo pipefail
source benchmarks/gpu_env.sh
step "python3 benchmarks/probe_pointwise.py"
timeout 560 python3 benchmarks/probe_pointwise.py ${PROBE_ARGS:-} 2>&1 | grep -v "^\s*$" | tee "$OUT/probe_pointwise.txt" | tail -80
