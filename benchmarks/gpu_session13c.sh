#!/usr/bin/env bash
# Session 13, third GPU call: correctness of nhwc_preround (nhwc_igemm on an input rounded to TF32 before the
# kernel). (1) The copy that rounds, bit for bit against the host rounding of torch's copy, on random shapes
# (tests/gpu_scripts/layout_copy.py). (2) The library on random layouts, every second key pinned to a kernel the
# rule would not pick, nhwc_preround among them (tests/gpu_scripts/library_layouts.py). (3) The GPU correctness
# command on the new variant. Logs under $OUT.
set -uo pipefail
source benchmarks/gpu_env.sh
step "python3 tests/gpu_scripts/layout_copy.py"
timeout 100 python3 tests/gpu_scripts/layout_copy.py 2>&1 | tail -8
step "python3 tests/gpu_scripts/library_layouts.py"
timeout 200 python3 tests/gpu_scripts/library_layouts.py 2>&1 | tail -25
step "python3 -m convtune.verify --variants nhwc_preround --precisions tf32,ieee --shapes 300 --seed 13 --workers 14"
timeout 280 python3 -m convtune.verify --variants nhwc_preround --precisions tf32,ieee --shapes 300 --seed 13 \
  --workers 14 --max-seconds 250 --out "$OUT/verify.jsonl" 2>&1 | tail -20
python3 benchmarks/verify_counts.py "$OUT/verify.jsonl"
