#!/usr/bin/env bash
# The GPU evidence for issue 8, in one device call: rounding cost, the export checked as KernelBench does and
# by KernelBench's own judge, and the GPU correctness command on many random shapes. Logs go to $OUT (or ./out).
# Needs .whl (bash ../shared/device/fetch-wheels.sh) and, for the judge, .kb/ (KernelBench's eval.py, timing.py,
# dataset.py in .kb/kernelbench/, its level-1 #50 file as .kb/level1_50.py, extra wheels, if any, in .kb/whl/).
set -uo pipefail
OUT=${OUT:-out}; mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl $(ls .kb/whl/*.whl 2>/dev/null) || exit 1
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
step() { echo; echo "== $*"; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"
step "rounding cost: python3 benchmarks/tf32_rounding.py"
python3 benchmarks/tf32_rounding.py 2>&1 | tee "$OUT/tf32_rounding.txt"
step "export + KernelBench-style check: python3 promote.py export=kernelbench problem=kernelbench_l1_50"
python3 promote.py export=kernelbench problem=kernelbench_l1_50 export_path=$OUT/kernelbench_l1_50.py 2>&1 | tee "$OUT/export.txt"
step "KernelBench's own judge: eval_kernel_against_ref(num_correct_trials=5, num_perf_trials=100, backend=triton)"
python3 benchmarks/kernelbench_judge.py --kb .kb/kernelbench --ref .kb/level1_50.py "$OUT/kernelbench_l1_50.py" 2>&1 | tail -60 | tee "$OUT/judge.txt"
step "verify: python3 -m convtune.verify --shapes ${SHAPES:-1000} --workers ${WORKERS:-14}"
timeout ${VERIFY_TIMEOUT:-330} python3 -m convtune.verify --shapes ${SHAPES:-1000} --workers ${WORKERS:-14} --out "$OUT/verify.jsonl" 2>&1 | tee "$OUT/verify.txt" | tail -80
