#!/usr/bin/env bash
# Session 12, review: the GPU correctness command on nhwc_igemm, whose launcher now copies NCHW inputs with our
# copy (kernels/layout.py); layouts are drawn per case (NCHW and channels_last inputs and outputs). Logs under $OUT.
set -uo pipefail
source benchmarks/gpu_env.sh
step "python3 -m convtune.verify --variants nhwc_igemm --precisions tf32,ieee --shapes 300 --workers 14"
timeout 500 python3 -m convtune.verify --variants nhwc_igemm --precisions tf32,ieee --shapes 300 --seed 12 \
  --workers 14 --max-seconds 460 --out "$OUT/verify.jsonl" 2>&1 | tail -20
python3 benchmarks/verify_counts.py "$OUT/verify.jsonl"
