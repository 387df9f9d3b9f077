#!/usr/bin/env bash
# Issue 13, session 19: fused_gluon with its output stores marked evict_first and the L2 prefetch one row ahead. The
# GPU correctness command on it (its random-family script, bit for bit against fold_igemm; convtune.verify), then the
# tracker: a sweep of its warpgroups on L1 #50 in both layouts and a promote of kernel=library per layout. The pins
# file comes back as $OUT/pins.yaml. Logs under $OUT.
set -uo pipefail
source benchmarks/gpu_env.sh
step "python3 tests/gpu_scripts/fused_gluon.py"
timeout 200 python3 tests/gpu_scripts/fused_gluon.py 2>&1 | tail -6
step "python3 -m convtune.verify --variants fused_gluon --shapes 300 --workers 15 --max-seconds 100"
timeout 150 python3 -m convtune.verify --variants fused_gluon --shapes 300 --workers 15 --max-seconds 100 2>&1 \
  | grep -E "^FAIL|^\||failure|verify:|error" | cut -c1-300
rm -rf /tmp/t19h; mkdir -p /tmp/t19h
db="tracking.uri=sqlite:////tmp/t19h/mlflow.db"
step "python3 run.py -m kernel=fused_gluon problem=kernelbench_l1_50 problem.layout=nchw,channels_last num_stages=2,3"
timeout 120 python3 run.py -m kernel=fused_gluon problem=kernelbench_l1_50 problem.layout=nchw,channels_last \
  num_stages=2,3 $db hydra.sweep.dir=/tmp/t19h/sweep > "$OUT/sweep.txt" 2>&1
grep "^|" "$OUT/sweep.txt"
for layout in nchw channels_last; do
  step "python3 promote.py problem=kernelbench_l1_50 kernel=library problem.layout=$layout"
  timeout 100 python3 promote.py problem=kernelbench_l1_50 kernel=library problem.layout=$layout $db \
    > "$OUT/promote_$layout.txt" 2>&1
  grep -E "^promote:|^\||^decision|refused|^\+ |^- " "$OUT/promote_$layout.txt" | cut -c1-300
done
cp src/convtune/pins.yaml "$OUT/pins.yaml"
