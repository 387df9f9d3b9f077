#!/usr/bin/env bash
# Session 11, first GPU call: the library runs nhwc_igemm for channels_last calls and implicit_gemm writes
# channels_last outputs. Correctness first (verify with layouts drawn; the library on random layouts), then which
# kernel a channels_last input should run by its channel count. Logs under $OUT.
set -uo pipefail
source benchmarks/gpu_env.sh
step "python3 -m convtune.verify --variants implicit_gemm,nhwc_igemm --precisions tf32,ieee --shapes 150 --workers 14"
timeout 260 python3 -m convtune.verify --variants implicit_gemm,nhwc_igemm --precisions tf32,ieee --shapes 150 \
  --workers 14 --max-seconds 230 --out "$OUT/verify.jsonl" 2>&1 | tail -20
python3 benchmarks/verify_counts.py "$OUT/verify.jsonl"
step "python3 tests/gpu_scripts/library_layouts.py"
timeout 150 python3 tests/gpu_scripts/library_layouts.py 2>&1 | tail -25
step "python3 benchmarks/probe_cl_channels.py"
timeout 150 python3 benchmarks/probe_cl_channels.py 2>&1 | tail -25
