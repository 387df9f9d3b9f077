#!/usr/bin/env bash
# Issue 13, session 20: what bounds nchw_igemm (profile=ncu on vgg16_conv3_2 with an NCHW input, its pin's tile), next
# to nhwc_igemm on a channels_last input at the same tile (the register path against the shared-memory A operand).
# Logs under $OUT.
set -uo pipefail
source benchmarks/gpu_env.sh
rm -rf /tmp/ncu20; mkdir -p /tmp/ncu20
for run in "kernel=nchw_igemm problem.layout=nchw" "kernel=nhwc_igemm problem.layout=channels_last"; do
  step "python3 run.py problem=vgg16_conv3_2 $run BLOCK_M=64 BLOCK_N=256 BLOCK_K=32 num_warps=4 num_stages=3 profile=ncu"
  timeout 240 python3 run.py problem=vgg16_conv3_2 $run BLOCK_M=64 BLOCK_N=256 BLOCK_K=32 num_warps=4 num_stages=3 \
    profile=ncu tracking.uri=sqlite:////tmp/ncu20/mlflow.db hydra.run.dir=/tmp/ncu20/out 2>&1 | grep -v "INFO mlflow" | tail -3
done
step "NCU counters per run"
python3 benchmarks/ncu_runs.py sqlite:////tmp/ncu20/mlflow.db
