#!/usr/bin/env bash
# Session 13, tenth GPU call: the channels_last stride-1 keys contested again with nhwc_igemm's runs in the store too
# (gpu_session13d.sh and 13i logged nhwc_igemm on NCHW inputs only, so where a channels_last pin says torch the
# contest there had nhwc_preround alone): nhwc_igemm at its default and nhwc_preround at its two best tiles on the
# six layers that pass the judge, then `promote.py kernel=library` on each channels_last key. The pins file comes
# back as $OUT/pins.yaml. Logs under $OUT.
set -uo pipefail
source benchmarks/gpu_env.sh
rm -rf /tmp/s13j; mkdir -p /tmp/s13j
DB=sqlite:////tmp/s13j/mlflow.db
SIX=alexnet_conv2,alexnet_conv3,alexnet_conv4,alexnet_conv5,vgg16_conv3_2,resnet50_layer2_3x3
sweep() {
  step "python3 run.py -m $*"
  timeout 150 python3 run.py -m "$@" bench.rounds=3 bench.reps=10 tracking.uri=$DB hydra.sweep.dir=/tmp/s13j/sweep_$RANDOM \
    2>&1 | grep -v "INFO mlflow" | grep "→" | cut -c1-170
}
sweep kernel=nhwc_igemm problem=$SIX problem.layout=channels_last
sweep kernel=nhwc_preround problem=$SIX problem.layout=channels_last BLOCK_M=128 BLOCK_N=128 BLOCK_K=32 num_warps=4 num_stages=3
sweep kernel=nhwc_preround problem=$SIX problem.layout=channels_last BLOCK_M=128 BLOCK_N=256 BLOCK_K=32 num_warps=8 num_stages=4
for p in ${SIX//,/ }; do
  step "python3 promote.py kernel=library problem=$p problem.layout=channels_last"
  timeout 60 python3 promote.py kernel=library problem=$p problem.layout=channels_last tracking.uri=$DB \
    hydra.run.dir=/tmp/s13j/promote_$p 2>&1 \
    | grep -v "INFO mlflow" | grep -E "^(promote:|\||decision:|refused|error|pins file|ignoring)" | cut -c1-280
done
cp src/convtune/pins.yaml "$OUT/pins.yaml"
