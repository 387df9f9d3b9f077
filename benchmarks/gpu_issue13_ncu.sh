#!/usr/bin/env bash
# Issue 13: what bounds nhwc_igemm (run before TMA: docs/evidence/h200_issue13_ncu.txt; again with the weight
# tiles through TMA, L1 #50 added: h200_issue13_ncu_tma.txt): profile=ncu on three stride-1 layers (channels_last, their pins), on
# alexnet_conv3 through implicit_gemm (NCHW) for comparison, and on L1 #50 (implicit_gemm). Logs under $OUT.
set -uo pipefail
source benchmarks/gpu_env.sh
rm -rf /tmp/ncu13; mkdir -p /tmp/ncu13
run() {
  step "python3 run.py $* profile=ncu"
  timeout 150 python3 run.py "$@" profile=ncu tracking.uri=sqlite:////tmp/ncu13/mlflow.db hydra.run.dir=/tmp/ncu13/out \
    2>&1 | grep -v "INFO mlflow" | tail -3
}
for p in alexnet_conv3 vgg16_conv3_2 resnet50_layer2_3x3; do
  run kernel=nhwc_igemm problem.layout=channels_last problem=$p
done
run kernel=implicit_gemm problem=alexnet_conv3
run kernel=implicit_gemm problem=kernelbench_l1_50
step "NCU counters per run"
python3 benchmarks/ncu_runs.py sqlite:////tmp/ncu13/mlflow.db
