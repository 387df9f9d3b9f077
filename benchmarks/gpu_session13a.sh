#!/usr/bin/env bash
# Session 13, first GPU call: what rounding nhwc_igemm's activation tiles in the kernel costs against an input
# rounded beforehand (by a pass of its own, or by the NCHW -> channels_last copy the library makes anyway), and
# Triton's warp specialisation of the K loop (benchmarks/probe_prerounded.py). Logs under $OUT.
set -uo pipefail
source benchmarks/gpu_env.sh
step "python3 benchmarks/probe_prerounded.py"
timeout 400 python3 benchmarks/probe_prerounded.py 2>&1 | tee "$OUT/prerounded.txt" | tail -120
# Its second step, `probe_prerounded.py --ws --problems alexnet_conv4,vgg16_conv3_2,resnet50_layer2_3x3`, timed the
# K loop under tl.range(warp_specialize=True) through a WS constexpr of the kernel; both were removed after that run
# (no gain where it compiled, a compiler assertion elsewhere: docs/evidence/h200_issue13_prerounded.txt).
