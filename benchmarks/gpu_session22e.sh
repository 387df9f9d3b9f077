#!/usr/bin/env bash
# Issue 13, session 22: the KernelBench export of L1 #50 with its launch bound after the first call (fused_gluon's
# file; the export before it was judged 0.39 ms for a 0.29 ms kernel, its forward's host time 109 us): written,
# checked the tracker's way and by KernelBench's own eval_kernel_against_ref, then benchmarks/kernelbench_timing.py
# on it (host time of a forward; KernelBench's timing function on it, the library's call and the model). Logs under
# $OUT.
set -uo pipefail
source benchmarks/gpu_env.sh
rm -rf /tmp/t22e; mkdir -p /tmp/t22e
source benchmarks/gpu_export_judge.sh /tmp/t22e
step "python3 benchmarks/kernelbench_timing.py --kb .kb $OUT/kernelbench_l1_50.py"
timeout 200 python3 benchmarks/kernelbench_timing.py --kb .kb "$OUT/kernelbench_l1_50.py" 2>&1 | grep -v Warning \
  | tee "$OUT/kernelbench_timing.txt"
