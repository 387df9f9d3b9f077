#!/usr/bin/env bash
# Session 14, fifth GPU call: fold_igemm with its fold indexing in int32 per image (gpu_session14d found the fold at
# 0.194 ms against the probe's 0.082). (1) benchmarks/probe_fold_library.py again. (2) gpu_session14c.sh again on
# this source: the GPU check, the correctness command, the sweeps and the four promotes. Logs under $OUT.
set -uo pipefail
source benchmarks/gpu_env.sh
step "python3 benchmarks/probe_fold_library.py"
timeout 120 python3 benchmarks/probe_fold_library.py 2>&1 | tee "$OUT/h200_issue13_fold_library_b.txt" | tail -14
bash benchmarks/gpu_session14c.sh 2>&1 | grep -v "^NVIDIA H200\|^torch 2"
