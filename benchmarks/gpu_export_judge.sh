#!/usr/bin/env bash
# Sourced by gpu_session15a.sh and gpu_session15c.sh (after gpu_env.sh): the KernelBench export of L1 #50 with
# kernel=library, checked the tracker's way, then by KernelBench's own eval_kernel_against_ref (.kb/, see
# gpu_issue8.sh). $1: a scratch folder. The file and the log go to $OUT (kernelbench_l1_50.py, export.txt).
{
step "python3 promote.py export=kernelbench problem=kernelbench_l1_50 kernel=library"
timeout 90 python3 promote.py export=kernelbench problem=kernelbench_l1_50 kernel=library \
  export_path=$OUT/kernelbench_l1_50.py hydra.run.dir=$1/export 2>&1 | grep -v "INFO mlflow" | tail -8
step "KernelBench's eval_kernel_against_ref on the export"
timeout 120 python3 benchmarks/kernelbench_judge.py --kb .kb/kernelbench --ref .kb/level1_50.py \
  "$OUT/kernelbench_l1_50.py" 2>&1 | tail -30
} 2>&1 | tee $OUT/export.txt
