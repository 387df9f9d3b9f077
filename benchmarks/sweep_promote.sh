#!/usr/bin/env bash
# Sweep a kernel's 256-wide tiles from the tracker on the given keys and promote kernel=library for each, on the GPU
# machine (sourced environment: benchmarks/gpu_env.sh). The pins file comes back as $OUT/pins.yaml.
#   bash benchmarks/sweep_promote.sh STORE_DIR KERNEL "problem layout" ...
set -uo pipefail
dir=$1 kernel=$2; shift 2
mkdir -p "$dir"
db="tracking.uri=sqlite:///$dir/mlflow.db"
cfg='[{BLOCK_M: 128, BLOCK_N: 256, BLOCK_K: 32, num_warps: 8, num_stages: 4}, {BLOCK_M: 128, BLOCK_N: 256, BLOCK_K: 32, num_warps: 8, num_stages: 3}]'
for key in "$@"; do
  set -- $key
  echo; echo "== python3 run.py -m kernel=$kernel problem=$1 problem.layout=$2 (two tiles)"
  timeout 120 python3 run.py -m kernel=$kernel problem=$1 problem.layout=$2 "hydra.sweeper.configs=$cfg" \
    $db hydra.sweep.dir=$dir/sweep_$1_$2 2>&1 | grep -v "INFO mlflow" | tail -5
  echo; echo "== python3 promote.py problem=$1 kernel=library problem.layout=$2"
  timeout 150 python3 promote.py problem=$1 kernel=library problem.layout=$2 $db > $dir/promote_$1_$2.txt 2>&1
  grep -E "^promote:|^\||^decision|rror" $dir/promote_$1_$2.txt | cut -c1-300
done
cp src/convtune/pins.yaml "$OUT/pins.yaml"
