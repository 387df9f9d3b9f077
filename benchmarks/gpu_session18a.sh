#!/usr/bin/env bash
# Issue 13, session 18: fused_gluon in the library. The GPU correctness command on it (its random-family script and
# convtune.verify), then the tracker: a sweep of its MMA warpgroups (num_stages 2, 3) on L1 #50 in both layouts, and
# a promote of kernel=library per layout (fused_gluon against the pinned fold_igemm and cuDNN, re-timed head to
# head). The pins file comes back as $OUT/pins.yaml. Logs under $OUT.
set -uo pipefail
source benchmarks/gpu_env.sh
step "python3 tests/gpu_scripts/fused_gluon.py"
timeout 240 python3 tests/gpu_scripts/fused_gluon.py 2>&1 | tail -25
step "python3 -m convtune.verify --variants fused_gluon --shapes 300 --workers 15 --max-seconds 100"
timeout 160 python3 -m convtune.verify --variants fused_gluon --shapes 300 --workers 15 --max-seconds 100 2>&1 \
  | grep -E "^FAIL|^\||failure|verify:|error" | cut -c1-400
rm -rf /tmp/t18; mkdir -p /tmp/t18
step "python3 run.py -m kernel=fused_gluon problem=kernelbench_l1_50 problem.layout=nchw,channels_last num_stages=2,3"
timeout 150 python3 run.py -m kernel=fused_gluon problem=kernelbench_l1_50 problem.layout=nchw,channels_last \
  num_stages=2,3 tracking.uri=sqlite:////tmp/t18/mlflow.db hydra.sweep.dir=/tmp/t18/sweep 2>&1 | grep -v "INFO mlflow" \
  | tail -12
for layout in nchw channels_last; do
  step "python3 promote.py problem=kernelbench_l1_50 kernel=library problem.layout=$layout"
  timeout 100 python3 promote.py problem=kernelbench_l1_50 kernel=library problem.layout=$layout \
    tracking.uri=sqlite:////tmp/t18/mlflow.db 2>&1 | grep -v "INFO mlflow" | tail -40
done
cp src/convtune/pins.yaml "$OUT/pins.yaml"
