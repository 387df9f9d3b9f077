#!/usr/bin/env bash
# Issue 13, session 19, after gpu_session19h.sh: the KernelBench export of L1 #50 with kernel=library (fused_gluon's
# file, now with the stores hinted and the prefetch one row ahead), judged by KernelBench's own harness (.kb/), and
# L1 #50 through the library in both layouts beside fold_igemm and cuDNN (the README's table rows). Logs under $OUT.
set -uo pipefail
source benchmarks/gpu_env.sh
rm -rf /tmp/t19i; mkdir -p /tmp/t19i
source benchmarks/gpu_export_judge.sh /tmp/t19i
step "python3 run.py -m problem=kernelbench_l1_50 kernel=library,fold_igemm,fused_gluon problem.layout=nchw,channels_last"
timeout 200 python3 run.py -m problem=kernelbench_l1_50 kernel=library,fold_igemm,fused_gluon \
  problem.layout=nchw,channels_last tracking.uri=sqlite:////tmp/t19i/mlflow.db hydra.sweep.dir=/tmp/t19i/sweep \
  > "$OUT/side_by_side.txt" 2>&1
grep -E "^\[|^\|" "$OUT/side_by_side.txt" | grep -v HYDRA | tail -24
