#!/usr/bin/env bash
# Issue 12, every GPU of a host: the same 16-configuration sweep of L1 #50 through `hydra/launcher=gpus` on one
# GPU, then on every visible GPU; each into its own store (resume would otherwise skip the second) with its
# own empty Triton cache (so neither reuses the other's compiles). Then benchmarks/compare_sweeps.py.
# Needs .whl (bash ../shared/device/fetch-wheels.sh). Logs under $OUT (or ./out).
set -uo pipefail
OUT=${OUT:-out}; mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=index,name,driver_version --format=csv,noheader
SPACE="BLOCK_M=64,128 BLOCK_K=16,32 num_warps=4,8 num_stages=3,4"
for n in one all; do
  rm -rf /tmp/sw_$n; mkdir -p /tmp/sw_$n
  [ $n = one ] && GPUS="hydra.launcher.gpus=[0]" || GPUS=""
  echo; echo "== python3 run.py -m hydra/launcher=gpus $GPUS $SPACE  (TRITON_CACHE_DIR empty)"
  t0=$(date +%s.%N)
  TRITON_CACHE_DIR=/tmp/sw_$n/triton timeout 500 python3 run.py -m hydra/launcher=gpus $GPUS $SPACE \
    tracking.uri=sqlite:////tmp/sw_$n/mlflow.db hydra.sweep.dir=/tmp/sw_$n/sweep 2>&1 | grep -v "^|" | tail -25
  t1=$(date +%s.%N)
  echo "wall s ($n): $(python3 -c "print(round($t1 - $t0, 1))")"
done
echo; echo "== python3 benchmarks/compare_sweeps.py"
python3 benchmarks/compare_sweeps.py sqlite:////tmp/sw_one/mlflow.db sqlite:////tmp/sw_all/mlflow.db
