#!/usr/bin/env bash
# Issue 13: nhwc_igemm with its weight tiles loaded through a TMA descriptor against plain loads, side by side
# in one process on the seven stride-1 layers (prediction: fewer registers and address instructions per step,
# +3 to +8 %). Logs under $OUT.
set -uo pipefail
source benchmarks/gpu_env.sh
step "python3 benchmarks/probe_nhwc.py --weight-tma both --grid 'BM=64,128;BN=128,256;BK=32;W=4,8;S=3'"
timeout 400 python3 benchmarks/probe_nhwc.py --out "$OUT/nhwc_tma.jsonl" --weight-tma both \
  --grid 'BM=64,128;BN=128,256;BK=32;W=4,8;S=3' 2>&1 | grep -v "^$"
