#!/usr/bin/env bash
# Issue 13, session 19, after nchw_1x1's input descriptors were cached per address (host work per call): the GPU
# correctness command again (its script; verify on 150 cases), a sweep of the three best tiles of session 19c, a
# promote of kernel=library for resnet50_layer1_1x1's NCHW key, and +experiment=vs_cudnn on it and
# resnet50_layer2_3x3 (their table rows, cuDNN in both layouts; as first run, that step spelled the problems
# hydra.sweeper.params.problem=, which Hydra refused: 19e ran it as here). The pins file comes back as $OUT/pins.yaml. Logs under $OUT.
set -uo pipefail
source benchmarks/gpu_env.sh
step "python3 tests/gpu_scripts/nchw_1x1.py"
timeout 200 python3 tests/gpu_scripts/nchw_1x1.py 2>&1 | tail -8
step "python3 -m convtune.verify --variants nchw_1x1 --shapes 150 --workers 15 --max-seconds 90"
timeout 150 python3 -m convtune.verify --variants nchw_1x1 --shapes 150 --workers 15 --max-seconds 90 2>&1 \
  | grep -E "^FAIL|^\||failure|verify:|error" | cut -c1-300
rm -rf /tmp/t19; mkdir -p /tmp/t19
db="tracking.uri=sqlite:////tmp/t19/mlflow.db"
step "python3 run.py -m kernel=nchw_1x1 problem=resnet50_layer1_1x1 problem.layout=nchw (three tiles)"
timeout 120 python3 run.py -m kernel=nchw_1x1 problem=resnet50_layer1_1x1 problem.layout=nchw \
  'hydra.sweeper.configs=[{BLOCK_M: 64, BLOCK_N: 64, BLOCK_K: 32, num_warps: 4, num_stages: 3}, {BLOCK_M: 64, BLOCK_N: 64, BLOCK_K: 64, num_warps: 4, num_stages: 2}, {BLOCK_M: 128, BLOCK_N: 64, BLOCK_K: 32, num_warps: 4, num_stages: 3}]' \
  $db hydra.sweep.dir=/tmp/t19/sweep 2>&1 | grep -v "INFO mlflow" | tail -8
step "python3 promote.py problem=resnet50_layer1_1x1 kernel=library problem.layout=nchw"
timeout 120 python3 promote.py problem=resnet50_layer1_1x1 kernel=library problem.layout=nchw $db 2>&1 \
  | grep -v "INFO mlflow" | grep -v -i "warn\|plugin\|submitit" | tail -40
cp src/convtune/pins.yaml "$OUT/pins.yaml"
step "python3 run.py +experiment=vs_cudnn problem=resnet50_layer1_1x1,resnet50_layer2_3x3"
timeout 150 python3 run.py +experiment=vs_cudnn problem=resnet50_layer1_1x1,resnet50_layer2_3x3 $db \
  hydra.sweep.dir=/tmp/t19/vs 2>&1 | grep -v "INFO mlflow" | tail -24
find /tmp/t19/vs -name "per_problem.md" -exec cp {} "$OUT/" \; 2>/dev/null
find /tmp/t19 -name "per_problem.md" | head -3
