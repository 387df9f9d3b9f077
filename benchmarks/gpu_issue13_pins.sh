#!/usr/bin/env bash
# Issue 13: the GPU correctness command on nhwc_igemm (now with llvm_opt's one-time check), then the tracker:
# a sweep of nhwc_igemm on the seven stride-1 layers with channels_last inputs, and promote per layer (the
# kernel's own best: promote.torch=false). The pins file comes back as $OUT/pins.yaml. Logs under $OUT.
set -uo pipefail
source benchmarks/gpu_env.sh
LAYERS=alexnet_conv2,alexnet_conv3,alexnet_conv4,alexnet_conv5,vgg16_conv3_2,resnet50_layer1_1x1,resnet50_layer2_3x3
step "python3 -m convtune.verify --variants nhwc_igemm --shapes ${SHAPES:-200} --workers 15 --max-seconds 200"
timeout 230 python3 -m convtune.verify --variants nhwc_igemm --shapes ${SHAPES:-200} --workers 15 --max-seconds 200 2>&1 \
  | grep -E "^FAIL|^\||failure|verify:" | cut -c1-400
rm -rf /tmp/t13; mkdir -p /tmp/t13
step "python3 run.py -m kernel=nhwc_igemm problem.layout=channels_last problem=$LAYERS BLOCK_M=64,128 BLOCK_N=128,256 num_warps=4,8 BLOCK_K=32 num_stages=3 bench.rounds=3 bench.reps=10"
timeout 240 python3 run.py -m kernel=nhwc_igemm problem.layout=channels_last problem=$LAYERS BLOCK_M=64,128 \
  BLOCK_N=128,256 num_warps=4,8 BLOCK_K=32 num_stages=3 bench.rounds=3 bench.reps=10 tracking.uri=sqlite:////tmp/t13/mlflow.db \
  hydra.sweep.dir=/tmp/t13/sweep 2>&1 | grep -v "INFO mlflow" | tail -16
for p in ${LAYERS//,/ }; do
  step "python3 promote.py problem=$p kernel=nhwc_igemm problem.layout=channels_last promote.torch=false"
  timeout 60 python3 promote.py problem=$p kernel=nhwc_igemm problem.layout=channels_last promote.torch=false \
    tracking.uri=sqlite:////tmp/t13/mlflow.db 2>&1 | grep -v "INFO mlflow" | tail -4
done
cp src/convtune/pins.yaml "$OUT/pins.yaml"
