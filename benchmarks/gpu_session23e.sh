#!/usr/bin/env bash
# Issue 13, session 23: the split last wave (then in the library's module, now benchmarks/nhwc_split_probe.py) with the
# barrier after its arrival count. benchmarks/debug_split.py (with and without the barrier), then the GPU correctness
# command: the split's own script, the bound launches' script, the library's layouts script, convtune.verify on both
# nhwc kernels (the library's: they had the split then, and have not now). Logs under $OUT.
set -uo pipefail
source benchmarks/gpu_env.sh
step "python3 benchmarks/debug_split.py"
timeout 150 python3 benchmarks/debug_split.py 2>&1 | tee "$OUT/debug.txt" | grep -v Warning
# (session 23 ran the split's script as tests/gpu_scripts/nhwc_split.py, on the split then in the library's module)
for s in benchmarks/check_nhwc_split tests/gpu_scripts/bound_nhwc tests/gpu_scripts/library_layouts; do
  step "python3 $s.py"
  SECONDS=0
  timeout 130 python3 $s.py > "$OUT/${s##*/}.txt" 2>&1; echo "exit $? after ${SECONDS}s"
  grep -E "^FAIL|cases|ok$|Error" "$OUT/${s##*/}.txt" | tail -6
done
step "python3 -m convtune.verify --variants nhwc_igemm,nhwc_preround --precisions tf32,ieee --shapes 150 --workers 15 --max-seconds 70"
timeout 100 python3 -m convtune.verify --variants nhwc_igemm,nhwc_preround --precisions tf32,ieee --shapes 150 --workers 15 \
  --max-seconds 70 2>&1 | tee "$OUT/verify.txt" | grep -E "^FAIL|^\||failure|verify:|error" | cut -c1-300
