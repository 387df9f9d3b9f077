#!/usr/bin/env bash
# Session 13, sixth GPU call: nhwc_preround's tiles beyond the first grid on the channels_last layers where it is
# closest to or short of 0.9x cuDNN (alexnet_conv3, conv4, conv5, resnet50_layer2_3x3): 256-row tiles, 2 stages,
# BK 16 and 64, through the tracker (no promote: the keys are pinned to torch, which is faster from an idle GPU).
# Logs under $OUT.
set -uo pipefail
source benchmarks/gpu_env.sh
rm -rf /tmp/s13f; mkdir -p /tmp/s13f
DB=sqlite:////tmp/s13f/mlflow.db
P=alexnet_conv4,alexnet_conv3,alexnet_conv5,resnet50_layer2_3x3
sweep() {
  step "python3 run.py -m $*"
  timeout 200 python3 run.py -m "$@" bench.rounds=3 bench.reps=10 tracking.uri=$DB hydra.sweep.dir=/tmp/s13f/sweep_$RANDOM \
    2>&1 | grep -v "INFO mlflow" | grep -E "→|^\| [0-9]" | cut -c1-200
}
sweep kernel=nhwc_preround problem=$P problem.layout=channels_last BLOCK_M=128,256 BLOCK_N=128 BLOCK_K=32 num_warps=8 num_stages=2,3
sweep kernel=nhwc_preround problem=$P problem.layout=channels_last BLOCK_M=128 BLOCK_N=128 BLOCK_K=16,64 num_warps=4 num_stages=2,3
sweep kernel=nhwc_preround problem=$P problem.layout=channels_last BLOCK_M=128 BLOCK_N=128 BLOCK_K=32 num_warps=4 num_stages=2
