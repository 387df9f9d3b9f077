#!/usr/bin/env bash
# Session 12, fourth GPU call: the suite against cuDNN (+experiment=vs_cudnn: kernel=library in both layouts, and
# nhwc_igemm on NCHW inputs with our copy) and the pins of this checkout (gpu_session12c.sh's promotion). Logs under $OUT.
set -uo pipefail
source benchmarks/gpu_env.sh
rm -rf /tmp/vs; mkdir -p /tmp/vs
step "python3 run.py +experiment=vs_cudnn"
timeout 560 python3 run.py +experiment=vs_cudnn tracking.uri=sqlite:////tmp/vs/mlflow.db hydra.sweep.dir=/tmp/vs/sweep \
  2>&1 | grep -v "INFO mlflow" | grep -v "^| [0-9-]" | grep -v "HYDRA" | tail -40
