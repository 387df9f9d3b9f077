#!/usr/bin/env bash
# Issue 13, session 19: what bounds fused_gluon after its stores were hinted and its prefetch moved (profile=ncu on
# L1 #50, NCHW, its pin), to compare with session 18's counters (gpu_session18c.sh). Logs under $OUT.
set -uo pipefail
source benchmarks/gpu_env.sh
rm -rf /tmp/ncu19; mkdir -p /tmp/ncu19
step "python3 run.py problem=kernelbench_l1_50 kernel=fused_gluon profile=ncu"
timeout 300 python3 run.py problem=kernelbench_l1_50 kernel=fused_gluon profile=ncu \
  tracking.uri=sqlite:////tmp/ncu19/mlflow.db hydra.run.dir=/tmp/ncu19/out 2>&1 | grep -v "INFO mlflow" | tail -3
step "NCU counters per run"
python3 benchmarks/ncu_runs.py sqlite:////tmp/ncu19/mlflow.db
