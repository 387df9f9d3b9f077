#!/usr/bin/env bash
# Issue 13, session 19, with the pins of 19d (resnet50_layer1_1x1's NCHW key names nchw_1x1): the contest again on
# that key (its table: GPU time and from an idle GPU; the pin against torch), and +experiment=vs_cudnn on
# resnet50_layer1_1x1 and resnet50_layer2_3x3 (their table rows, cuDNN in both layouts). Logs under $OUT.
set -uo pipefail
source benchmarks/gpu_env.sh
rm -rf /tmp/t19; mkdir -p /tmp/t19
db="tracking.uri=sqlite:////tmp/t19/mlflow.db"
step "python3 run.py -m kernel=nchw_1x1 problem=resnet50_layer1_1x1 problem.layout=nchw BLOCK_M=64,128 BLOCK_N=64 BLOCK_K=32 num_warps=4 num_stages=3"
timeout 100 python3 run.py -m kernel=nchw_1x1 problem=resnet50_layer1_1x1 problem.layout=nchw BLOCK_M=64,128 \
  BLOCK_N=64 BLOCK_K=32 num_warps=4 num_stages=3 $db hydra.sweep.dir=/tmp/t19/sweep > "$OUT/sweep.txt" 2>&1
grep "^|" "$OUT/sweep.txt"
step "python3 promote.py problem=resnet50_layer1_1x1 kernel=library problem.layout=nchw"
timeout 120 python3 promote.py problem=resnet50_layer1_1x1 kernel=library problem.layout=nchw $db \
  > "$OUT/promote.txt" 2>&1
grep -E "^promote:|^\||^decision|refused" "$OUT/promote.txt"
step "python3 run.py +experiment=vs_cudnn problem=resnet50_layer1_1x1,resnet50_layer2_3x3"
timeout 200 python3 run.py +experiment=vs_cudnn problem=resnet50_layer1_1x1,resnet50_layer2_3x3 $db \
  hydra.sweep.dir=/tmp/t19/vs > "$OUT/vs_cudnn.txt" 2>&1
grep -E "^\||geomean|^\[" "$OUT/vs_cudnn.txt" | tail -30
