#!/usr/bin/env bash
# The whole pipeline once on a GPU, after a change to its structure: a single run, a small sweep, the names
# every run wrote against the run record, promote on those runs, the KernelBench export checked, the gpu tests.
# Needs .whl (bash ../shared/device/fetch-wheels.sh). Logs under $OUT (or ./out).
set -uo pipefail
OUT=${OUT:-out}; mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
S=sqlite:////tmp/smoke/mlflow.db
step() { echo; echo "== $*"; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
step "python3 run.py problem=kernelbench_l1_50"
timeout 200 python3 run.py problem=kernelbench_l1_50 tracking.uri=$S hydra.run.dir=/tmp/smoke/run 2>&1 | tail -4
step "python3 run.py -m problem=alexnet_conv5 bench=fast num_warps=4,8"
timeout 200 python3 run.py -m problem=alexnet_conv5 bench=fast num_warps=4,8 tracking.uri=$S hydra.sweep.dir=/tmp/smoke/sweep 2>&1 | tail -6
step "every name the runs wrote, against convtune/record.py"
python3 -c "
from mlflow.tracking import MlflowClient
from convtune import record
c = MlflowClient('$S'); runs = c.search_runs([e.experiment_id for e in c.search_experiments()])
for r in runs:
    bad = [record.undeclared(k, getattr(r.data, k)) for k in ('tags', 'params', 'metrics')]
    print(r.info.run_name, r.data.tags.get('status'), 'undeclared:', bad, 'latency_ms', r.data.metrics.get('latency_ms'), 'vs cuDNN', r.data.metrics.get('speedup_vs_cudnn'))
"
step "python3 promote.py problem=alexnet_conv5 (a temp pins file)"
timeout 150 python3 promote.py problem=alexnet_conv5 tracking.uri=$S pins_file=/tmp/smoke/pins.yaml promote.rounds=5 hydra.run.dir=/tmp/smoke/promote 2>&1 | tail -12
step "python3 promote.py export=kernelbench problem=kernelbench_l1_50"
timeout 150 python3 promote.py export=kernelbench problem=kernelbench_l1_50 export_path=/tmp/smoke/kb.py hydra.run.dir=/tmp/smoke/export 2>&1 | tail -8
step "python3 -m pytest tests/test_gpu.py"
timeout 240 python3 -m pytest -q -p no:cacheprovider tests/test_gpu.py 2>&1 | tail -6
