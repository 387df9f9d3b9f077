#!/usr/bin/env bash
# Issue 13: the suite against cuDNN in both input layouts (+experiment=vs_cudnn), with the pins of this
# checkout. Logs under $OUT.
set -uo pipefail
source benchmarks/gpu_env.sh
rm -rf /tmp/vs; mkdir -p /tmp/vs
step "python3 run.py +experiment=vs_cudnn"
date +%T; timeout 540 python3 run.py +experiment=vs_cudnn tracking.uri=sqlite:////tmp/vs/mlflow.db hydra.sweep.dir=/tmp/vs/sweep \
  2>&1 | grep -v "INFO mlflow" | grep -v "^| [0-9-]" | tail -40
date +%T
