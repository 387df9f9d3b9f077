#!/usr/bin/env bash
# Session 11, third GPU call: the suite against cuDNN with what the library runs (+experiment=vs_cudnn,
# kernel=library) and the pins of this checkout (gpu_session11b.sh's promotions). Logs under $OUT.
set -uo pipefail
source benchmarks/gpu_env.sh
rm -rf /tmp/vs; mkdir -p /tmp/vs
step "python3 run.py +experiment=vs_cudnn"
timeout 400 python3 run.py +experiment=vs_cudnn tracking.uri=sqlite:////tmp/vs/mlflow.db hydra.sweep.dir=/tmp/vs/sweep \
  2>&1 | grep -v "INFO mlflow" | grep -v "^| [0-9-]" | grep -v "HYDRA" | tail -34
