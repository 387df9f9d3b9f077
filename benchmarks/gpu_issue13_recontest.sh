#!/usr/bin/env bash
# Issue 13: the nhwc_igemm pins were contested (67ca33f) before the contest wrote its output in the problem's
# layout (f8e2ab4: a channels_last problem's contenders were timed writing an NCHW output). Contest them again:
# the same sweep on the seven stride-1 layers with channels_last inputs, then promote per layer (the kernel's own
# best: promote.torch=false). The pins file comes back as $OUT/pins.yaml. Logs under $OUT.
set -uo pipefail
source benchmarks/gpu_env.sh
LAYERS=alexnet_conv2,alexnet_conv3,alexnet_conv4,alexnet_conv5,vgg16_conv3_2,resnet50_layer1_1x1,resnet50_layer2_3x3
rm -rf /tmp/t13; mkdir -p /tmp/t13
step "python3 run.py -m kernel=nhwc_igemm problem.layout=channels_last problem=$LAYERS BLOCK_M=64,128 BLOCK_N=128,256 num_warps=4,8 BLOCK_K=32 num_stages=3 bench.rounds=3 bench.reps=10"
timeout 300 python3 run.py -m kernel=nhwc_igemm problem.layout=channels_last problem=$LAYERS BLOCK_M=64,128 \
  BLOCK_N=128,256 num_warps=4,8 BLOCK_K=32 num_stages=3 bench.rounds=3 bench.reps=10 tracking.uri=sqlite:////tmp/t13/mlflow.db \
  hydra.sweep.dir=/tmp/t13/sweep 2>&1 | grep -v "INFO mlflow" | grep "→" | cut -c1-200
for p in ${LAYERS//,/ }; do
  step "python3 promote.py problem=$p kernel=nhwc_igemm problem.layout=channels_last promote.torch=false"
  timeout 60 python3 promote.py problem=$p kernel=nhwc_igemm problem.layout=channels_last promote.torch=false \
    tracking.uri=sqlite:////tmp/t13/mlflow.db 2>&1 | grep -v "INFO mlflow" | tail -6 | cut -c1-300
done
cp src/convtune/pins.yaml "$OUT/pins.yaml"
