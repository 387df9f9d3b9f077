#!/usr/bin/env bash
# Session 14, sixth GPU call, with gpu_session14e's pins (fold_igemm for L1 #50 and the ResNet-50 stem in both
# layouts): (1) the GPU tests (tests/test_gpu.py, fold_igemm's check among them); (2) the KernelBench export of L1 #50
# checked as KernelBench checks it; (3) the suite against cuDNN (+experiment=vs_cudnn). Logs under $OUT.
set -uo pipefail
source benchmarks/gpu_env.sh
step "python3 -m pytest -q tests/test_gpu.py"
timeout 280 python3 -m pytest -q -p no:cacheprovider tests/test_gpu.py 2>&1 | tail -6
step "python3 promote.py export=kernelbench problem=kernelbench_l1_50"
rm -rf /tmp/s14f; mkdir -p /tmp/s14f
timeout 60 python3 promote.py export=kernelbench problem=kernelbench_l1_50 export_path=/tmp/s14f/l1_50.py \
  hydra.run.dir=/tmp/s14f/export 2>&1 | grep -v "INFO mlflow" | tail -8
bash benchmarks/gpu_issue13_table.sh 2>&1 | grep -v "^NVIDIA H200\|^torch 2"
