#!/usr/bin/env bash
# Issue 13, the channels_last kernel (kernels/nhwc_igemm.py) on the H200: the GPU correctness command on it,
# then a wider grid on the seven stride-1 layers (the first grid's winners sat at its edge: M128-N128-w4, 244
# registers). Logs under $OUT.
set -uo pipefail
source benchmarks/gpu_env.sh
step "python3 -m convtune.verify --variants nhwc_igemm --shapes ${SHAPES:-300} --workers 15 --max-seconds 280"
timeout 300 python3 -m convtune.verify --variants nhwc_igemm --shapes ${SHAPES:-300} --workers 15 --max-seconds 280 2>&1 | tail -25
step "python3 benchmarks/probe_nhwc.py --grid 'BM=128,256;BN=128,256;BK=32,64;W=8;S=3'"
timeout 200 python3 benchmarks/probe_nhwc.py --out "$OUT/nhwc_wide.jsonl" --grid 'BM=128,256;BN=128,256;BK=32,64;W=8;S=3' 2>&1 | grep -E "SUMMARY|error|Error" 
step "python3 benchmarks/probe_nhwc.py --grid 'BM=64,128;BN=128,256;BK=64;W=4;S=2,3'"
timeout 200 python3 benchmarks/probe_nhwc.py --out "$OUT/nhwc_k64.jsonl" --grid 'BM=64,128;BN=128,256;BK=64;W=4;S=2,3' 2>&1 | grep -E "SUMMARY|error|Error"
