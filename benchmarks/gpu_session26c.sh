#!/usr/bin/env bash
# Issue 13, session 26: what bounds nhwc_streamk on alexnet_conv5 with an NCHW input (its pin), next to nhwc_preround at
# the same tile: the tracker's profile=ncu counters for each, printed per run by benchmarks/ncu_runs.py. Logs under $OUT.
set -uo pipefail
source benchmarks/gpu_env.sh
rm -rf /tmp/ncu26; mkdir -p /tmp/ncu26
for k in nhwc_streamk nhwc_preround; do
  step "python3 run.py problem=alexnet_conv5 problem.layout=nchw kernel=$k profile=ncu (M128-N256-K32-w8-s4)"
  timeout 150 python3 run.py problem=alexnet_conv5 problem.layout=nchw kernel=$k profile=ncu BLOCK_M=128 BLOCK_N=256 \
    BLOCK_K=32 num_warps=8 num_stages=4 tracking.uri=sqlite:////tmp/ncu26/mlflow.db hydra.run.dir=/tmp/ncu26/out_$k \
    2>&1 | grep -v "INFO mlflow" | tail -3
done
step "NCU counters per run"
python3 benchmarks/ncu_runs.py sqlite:////tmp/ncu26/mlflow.db 2>&1 | tee "$OUT/ncu_runs.txt"
