#!/usr/bin/env bash
# Session 11, second GPU call. (1) The two stride-1 layers below 0.9x cuDNN channels_last (alexnet_conv4,
# resnet50_layer2_3x3) swept on a wider grid than before (BLOCK_K 16 as well as 32, num_stages 3-4, and BLOCK_M 32
# for the small ResNet layer), with the fixed timing, then promoted (the kernel's own best: promote.torch=false).
# Before them: the library on random layouts (tests/gpu_scripts/library_layouts.py) and the L1 #50 export (one
# constexpr more, OUT_CL) through KernelBench's own judge (.kb/, see gpu_issue8.sh).
# The pins file comes back as $OUT/pins.yaml; the suite table is gpu_session11c.sh. Logs under $OUT.
set -uo pipefail
source benchmarks/gpu_env.sh
step "python3 tests/gpu_scripts/library_layouts.py"
timeout 150 python3 tests/gpu_scripts/library_layouts.py 2>&1 | tail -25
step "python3 promote.py export=kernelbench problem=kernelbench_l1_50; KernelBench's eval_kernel_against_ref"
timeout 60 python3 promote.py export=kernelbench problem=kernelbench_l1_50 export_path=$OUT/kernelbench_l1_50.py 2>&1 \
  | grep -v "INFO mlflow" | tail -8
timeout 90 python3 benchmarks/kernelbench_judge.py --kb .kb/kernelbench --ref .kb/level1_50.py "$OUT/kernelbench_l1_50.py" \
  2>&1 | tail -20
rm -rf /tmp/s11; mkdir -p /tmp/s11
DB=sqlite:////tmp/s11/mlflow.db
sweep() {  # problem, then the grid
  local p=$1; shift
  step "python3 run.py -m kernel=nhwc_igemm problem.layout=channels_last problem=$p $* bench.rounds=3 bench.reps=10"
  timeout 170 python3 run.py -m kernel=nhwc_igemm problem.layout=channels_last problem=$p "$@" bench.rounds=3 \
    bench.reps=10 tracking.uri=$DB hydra.sweep.dir=/tmp/s11/sweep_$p 2>&1 | grep -v "INFO mlflow" | grep "→" | cut -c1-160
  step "python3 promote.py problem=$p kernel=nhwc_igemm problem.layout=channels_last promote.torch=false"
  timeout 60 python3 promote.py problem=$p kernel=nhwc_igemm problem.layout=channels_last promote.torch=false \
    tracking.uri=$DB 2>&1 | grep -v "INFO mlflow" | tail -6 | cut -c1-300
}
sweep resnet50_layer2_3x3 BLOCK_M=32,64,128 BLOCK_N=64,128 BLOCK_K=16,32 num_warps=4 num_stages=3,4
sweep alexnet_conv4 BLOCK_M=64,128 BLOCK_N=128,256 BLOCK_K=16,32 num_warps=4,8 num_stages=3,4
cp src/convtune/pins.yaml "$OUT/pins.yaml"
