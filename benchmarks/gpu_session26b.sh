#!/usr/bin/env bash
# Issue 13, session 26, second call: the four binaries convtune.verify found wrong in 26a (benchmarks/debug_streamk_s1.py,
# now with nhwc_streamk's kernel in llvm_opt.KERNELS), the suite problems of nhwc_streamk's GPU script, convtune.verify on
# it again, then its tiles swept from the tracker on alexnet_conv5 (NCHW) and alexnet_conv2 (both layouts) and a promote
# of kernel=library for each key. The pins file comes back as $OUT/pins.yaml. Logs under $OUT.
set -uo pipefail
source benchmarks/gpu_env.sh
step "python3 benchmarks/debug_streamk_s1.py"
timeout 60 python3 benchmarks/debug_streamk_s1.py 2>&1 | grep -v Warning | tee "$OUT/debug_streamk_s1.txt"
step "python3 tests/gpu_scripts/nhwc_streamk.py 0"
timeout 100 python3 tests/gpu_scripts/nhwc_streamk.py 0 2>&1 | grep -v Warning > "$OUT/nhwc_streamk_problems.txt"; echo "exit ${PIPESTATUS[0]}"
cut -c1-200 "$OUT/nhwc_streamk_problems.txt" | tail -14
step "python3 -m convtune.verify --variants nhwc_streamk --shapes 60"
timeout 80 python3 -m convtune.verify --variants nhwc_streamk --shapes 60 --workers 15 2>&1 | grep -v "resource_tracker\|warnings.warn" | tail -8
rm -rf /tmp/t26; mkdir -p /tmp/t26
db="tracking.uri=sqlite:////tmp/t26/mlflow.db"
cfg='[{BLOCK_M: 128, BLOCK_N: 256, BLOCK_K: 32, num_warps: 8, num_stages: 4}, {BLOCK_M: 128, BLOCK_N: 256, BLOCK_K: 32, num_warps: 8, num_stages: 3}, {BLOCK_M: 64, BLOCK_N: 256, BLOCK_K: 32, num_warps: 4, num_stages: 3}]'
for key in "alexnet_conv5 nchw" "alexnet_conv2 nchw" "alexnet_conv2 channels_last"; do
  set -- $key
  step "python3 run.py -m kernel=nhwc_streamk problem=$1 problem.layout=$2 (three tiles)"
  timeout 100 python3 run.py -m kernel=nhwc_streamk problem=$1 problem.layout=$2 "hydra.sweeper.configs=$cfg" \
    $db hydra.sweep.dir=/tmp/t26/sweep_$1_$2 2>&1 | grep -v "INFO mlflow" | tail -5
  step "python3 promote.py problem=$1 kernel=library problem.layout=$2"
  timeout 100 python3 promote.py problem=$1 kernel=library problem.layout=$2 $db > /tmp/t26/promote_$1_$2.txt 2>&1
  grep -E "^promote:|^\||^decision|rror" /tmp/t26/promote_$1_$2.txt | cut -c1-300
done
cp src/convtune/pins.yaml "$OUT/pins.yaml"
