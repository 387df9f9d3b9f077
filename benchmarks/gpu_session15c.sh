#!/usr/bin/env bash
# Session 15, third GPU call, on the tiled fold's source: (1) the KernelBench export of L1 #50 (kernel=library:
# fold_igemm) checked the tracker's way and by KernelBench's own eval_kernel_against_ref (.kb/); (2) the suite against
# cuDNN (+experiment=vs_cudnn, gpu_issue13_table.sh). Logs under $OUT.
set -uo pipefail
source benchmarks/gpu_env.sh
rm -rf /tmp/s15c; mkdir -p /tmp/s15c
source benchmarks/gpu_export_judge.sh /tmp/s15c
bash benchmarks/gpu_issue13_table.sh 2>&1 | grep -v "^NVIDIA H200\|^torch 2" | tee $OUT/vs_cudnn.txt
