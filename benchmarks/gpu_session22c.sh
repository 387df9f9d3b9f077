#!/usr/bin/env bash
# Issue 13, session 22, with the pins of gpu_session22b.sh: the KernelBench export of L1 #50 with kernel=library
# (fused_gluon's file with the window), judged by KernelBench's own harness; then the suite against cuDNN in both input
# layouts (+experiment=vs_cudnn: the README's table). Logs under $OUT.
set -uo pipefail
source benchmarks/gpu_env.sh
rm -rf /tmp/t22c; mkdir -p /tmp/t22c
source benchmarks/gpu_export_judge.sh /tmp/t22c
step "python3 run.py +experiment=vs_cudnn"
timeout 420 python3 run.py +experiment=vs_cudnn tracking.uri=sqlite:////tmp/t22c/mlflow.db \
  hydra.sweep.dir=/tmp/t22c/vs > "$OUT/vs_cudnn.txt" 2>&1
grep -E "^\||geomean" "$OUT/vs_cudnn.txt" | grep -v "^| [0-9-]" | tail -40
find /tmp/t22c/vs -name "per_problem.md" -exec cp {} "$OUT/" \; 2>/dev/null
