set -uo pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
echo "== python3 benchmarks/probe_train_step.py"; timeout 150 python3 benchmarks/probe_train_step.py 2>&1 | tail -20
for i in 1 2; do echo "== drop_in run $i"; timeout 200 python3 benchmarks/drop_in.py --shapes 2 --batch 32 --steps 150 2>&1 | grep -E "median ms per step|stem conv1"; done
