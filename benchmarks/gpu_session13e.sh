#!/usr/bin/env bash
# Session 13, fifth GPU call: (1) the suite against cuDNN (+experiment=vs_cudnn: kernel=library in both layouts,
# nhwc_igemm on NCHW inputs, nhwc_preround in both layouts) with the pins gpu_session13d.sh promoted; (2) what
# bounds nhwc_preround against nhwc_igemm: profile=ncu on alexnet_conv4 and vgg16_conv3_2 (channels_last), each at
# its variant's default. Logs under $OUT.
set -uo pipefail
source benchmarks/gpu_env.sh
rm -rf /tmp/vs /tmp/ncu13; mkdir -p /tmp/vs /tmp/ncu13
step "python3 run.py +experiment=vs_cudnn"
timeout 330 python3 run.py +experiment=vs_cudnn tracking.uri=sqlite:////tmp/vs/mlflow.db hydra.sweep.dir=/tmp/vs/sweep \
  2>&1 | grep -v "INFO mlflow" | grep -v "^| [0-9-]" | grep -v "HYDRA" | tail -48
run() {
  step "python3 run.py $* profile=ncu"
  timeout 60 python3 run.py "$@" profile=ncu tracking.uri=sqlite:////tmp/ncu13/mlflow.db hydra.run.dir=/tmp/ncu13/out \
    2>&1 | grep -v "INFO mlflow" | tail -2
}
for p in alexnet_conv4 vgg16_conv3_2; do
  for k in nhwc_igemm nhwc_preround; do
    run kernel=$k problem.layout=channels_last problem=$p
  done
done
step "NCU counters per run"
python3 benchmarks/ncu_runs.py sqlite:////tmp/ncu13/mlflow.db
