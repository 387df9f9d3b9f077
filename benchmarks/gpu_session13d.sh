#!/usr/bin/env bash
# Session 13, fourth GPU call: nhwc_preround configured from the tracker, and every stride-1 key contested again
# with the contest's idle-GPU timing now on the library's prepared call (kernels' `prepared`). (1) Sweeps of
# nhwc_preround on the six stride-1 layers that pass the judge, both input layouts (the tiles that won on a rounded
# input: M128-N128 with 4/8 warps and 3 stages, M128-N256 with 8 warps and 3/4 stages); nhwc_igemm on the NCHW
# inputs of all seven at its default (the CL keys' pins are nhwc_igemm's and contend themselves). (2)
# `promote.py kernel=library` on each key in both layouts: the pin against the runs of every library kernel and
# torch. The pins file comes back as $OUT/pins.yaml. Logs under $OUT.
set -uo pipefail
source benchmarks/gpu_env.sh
rm -rf /tmp/s13d; mkdir -p /tmp/s13d
DB=sqlite:////tmp/s13d/mlflow.db
SIX=alexnet_conv2,alexnet_conv3,alexnet_conv4,alexnet_conv5,vgg16_conv3_2,resnet50_layer2_3x3
SEVEN=$SIX,resnet50_layer1_1x1
sweep() {
  step "python3 run.py -m $*"
  timeout 200 python3 run.py -m "$@" bench.rounds=3 bench.reps=10 tracking.uri=$DB hydra.sweep.dir=/tmp/s13d/sweep_$RANDOM \
    2>&1 | grep -v "INFO mlflow" | grep "→" | cut -c1-170
}
sweep kernel=nhwc_preround problem=$SIX problem.layout=nchw,channels_last BLOCK_M=128 BLOCK_N=128 BLOCK_K=32 num_warps=4,8 num_stages=3
sweep kernel=nhwc_preround problem=$SIX problem.layout=nchw,channels_last BLOCK_M=128 BLOCK_N=256 BLOCK_K=32 num_warps=8 num_stages=3,4
sweep kernel=nhwc_igemm problem=$SEVEN problem.layout=nchw
for l in nchw channels_last; do
  for p in ${SEVEN//,/ }; do
    step "python3 promote.py kernel=library problem=$p problem.layout=$l"
    timeout 60 python3 promote.py kernel=library problem=$p problem.layout=$l tracking.uri=$DB \
      hydra.run.dir=/tmp/s13d/promote_${p}_$l 2>&1 \
      | grep -v "INFO mlflow" | grep -E "^(promote:|\||decision:|refused|error|pins file|ignoring)" | cut -c1-280
  done
done
cp src/convtune/pins.yaml "$OUT/pins.yaml"
