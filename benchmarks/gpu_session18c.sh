#!/usr/bin/env bash
# Issue 13, session 18: what bounds fused_gluon as the library runs it: profile=ncu on L1 #50 (NCHW, its pin) through
# the tracker, against fold_igemm's conv on the same problem. Logs under $OUT.
set -uo pipefail
source benchmarks/gpu_env.sh
rm -rf /tmp/ncu18; mkdir -p /tmp/ncu18
for k in fused_gluon fold_igemm; do
  step "python3 run.py problem=kernelbench_l1_50 kernel=$k profile=ncu"
  timeout 200 python3 run.py problem=kernelbench_l1_50 kernel=$k profile=ncu tracking.uri=sqlite:////tmp/ncu18/mlflow.db \
    hydra.run.dir=/tmp/ncu18/out_$k 2>&1 | grep -v "INFO mlflow" | tail -3
done
step "NCU counters per run"
python3 benchmarks/ncu_runs.py sqlite:////tmp/ncu18/mlflow.db
