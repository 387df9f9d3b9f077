#!/usr/bin/env bash
# Issue 13, session 25: after common.safe_stages (nhwc_igemm compiles a K loop of num_stages - 1 steps one stage
# shallower): the nhwc kernels on short K loops (tests/gpu_scripts/nhwc_short_k.py), the other stride-1 kernels on the
# same short loops (benchmarks/short_k_others.py), the bound nhwc launches and convtune.verify on the nhwc variants (it
# ran out of its timeout here; the session's next call ran it on 100 shapes a precision). Logs under $OUT.
set -uo pipefail
source benchmarks/gpu_env.sh
step "python3 tests/gpu_scripts/nhwc_short_k.py"
timeout 200 python3 tests/gpu_scripts/nhwc_short_k.py 2>&1 | grep -v Warning > "$OUT/nhwc_short_k.txt"; echo "exit $?"; grep -c "^ok " "$OUT/nhwc_short_k.txt"; grep -v "^ok " "$OUT/nhwc_short_k.txt" | tail -8
step "python3 benchmarks/short_k_others.py"
timeout 120 python3 benchmarks/short_k_others.py 2>&1 | grep -v Warning > "$OUT/short_k_others.txt"; grep -v "^ok " "$OUT/short_k_others.txt" | tail -25
step "python3 tests/gpu_scripts/bound_nhwc.py"
timeout 50 python3 tests/gpu_scripts/bound_nhwc.py 2>&1 | tail -2
step "python3 -m convtune.verify --variants nhwc_igemm,nhwc_preround --shapes 300"
timeout 140 python3 -m convtune.verify --variants nhwc_igemm,nhwc_preround --shapes 300 --workers 15 --max-seconds 110 2>&1 | tail -6
