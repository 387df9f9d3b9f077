#!/usr/bin/env bash
# Issue 13, session 19: the whole suite against cuDNN in both input layouts (+experiment=vs_cudnn,
# gpu_issue13_table.sh) with this session's pins and kernels (nchw_1x1 pinned for the 1x1's NCHW key, fused_gluon's
# hints): the README's table from one run. Logs under $OUT.
set -uo pipefail
bash benchmarks/gpu_issue13_table.sh 2>&1 | grep -v "HYDRA\] \|^\[[0-9]*/45\]" | tee "$OUT/vs_cudnn.txt"
