#!/usr/bin/env bash
# Issue 13, session 22, after gpu_session22a.sh: the tracker on fused_gluon with the window. A sweep of its MMA
# warpgroups (num_stages 1, 2) on L1 #50 in both input layouts; a promote of kernel=library per layout (the NCHW key's
# pin, fused_gluon at num_stages 3, no longer runs: the contest takes the key's other contenders and cuDNN). The pins
# file comes back as $OUT/pins.yaml. Logs under $OUT.
set -uo pipefail
source benchmarks/gpu_env.sh
rm -rf /tmp/t22; mkdir -p /tmp/t22
db="tracking.uri=sqlite:////tmp/t22/mlflow.db"
step "python3 run.py -m kernel=fused_gluon problem=kernelbench_l1_50 problem.layout=nchw,channels_last num_stages=1,2"
timeout 120 python3 run.py -m kernel=fused_gluon problem=kernelbench_l1_50 problem.layout=nchw,channels_last \
  num_stages=1,2 $db hydra.sweep.dir=/tmp/t22/sweep > "$OUT/sweep.txt" 2>&1
grep "^|" "$OUT/sweep.txt"
for layout in nchw channels_last; do
  step "python3 promote.py problem=kernelbench_l1_50 kernel=library problem.layout=$layout"
  timeout 120 python3 promote.py problem=kernelbench_l1_50 kernel=library problem.layout=$layout $db \
    > "$OUT/promote_$layout.txt" 2>&1
  grep -E "^promote:|^\||^decision|refused|error|^\+ |^- " "$OUT/promote_$layout.txt" | cut -c1-300
done
cp src/convtune/pins.yaml "$OUT/pins.yaml"
