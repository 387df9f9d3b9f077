#!/usr/bin/env bash
# Sourced by gpu_session15d.sh and gpu_session15e.sh (after gpu_env.sh): the GPU scripts named in $1 (under
# tests/gpu_scripts/), then the correctness command on nhwc_igemm and nhwc_preround at tf32 (150 shapes each, seed 15)
# and its counts. Logs: $OUT/gpu_scripts.txt, $OUT/verify.txt, $OUT/verify.jsonl.
for s in $1; do
  step "python3 tests/gpu_scripts/$s.py"
  timeout 200 python3 tests/gpu_scripts/$s.py 2>&1 | tail -5
done 2>&1 | tee $OUT/gpu_scripts.txt
step "python3 -m convtune.verify --variants nhwc_igemm,nhwc_preround --precisions tf32 --shapes 150 --seed 15 --workers 14"
timeout 200 python3 -m convtune.verify --variants nhwc_igemm,nhwc_preround --precisions tf32 --shapes 150 --seed 15 \
  --workers 14 --max-seconds 170 --out "$OUT/verify.jsonl" 2>&1 | tail -8 | tee $OUT/verify.txt
python3 benchmarks/verify_counts.py "$OUT/verify.jsonl" | tee -a $OUT/verify.txt
