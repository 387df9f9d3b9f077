#!/usr/bin/env bash
# Issue 13, session 26: nhwc_streamk (kernels/nhwc_streamk.py) on the GPU: its correctness script on random shapes and
# the suite problems, convtune.verify on it, then its speed against nhwc_preround and cuDNN (benchmarks/probe_streamk.py).
# Logs under $OUT.
set -uo pipefail
source benchmarks/gpu_env.sh
step "python3 tests/gpu_scripts/nhwc_streamk.py 60"
timeout 230 python3 tests/gpu_scripts/nhwc_streamk.py 60 2>&1 | grep -v Warning > "$OUT/nhwc_streamk.txt"; echo "exit ${PIPESTATUS[0]}"
grep -c "^ok " "$OUT/nhwc_streamk.txt"; grep -v "^ok " "$OUT/nhwc_streamk.txt" | tail -12; grep "alexnet" "$OUT/nhwc_streamk.txt" | head -12
step "python3 benchmarks/probe_streamk.py"
timeout 250 python3 benchmarks/probe_streamk.py 2>&1 | grep -v Warning | tee "$OUT/probe_streamk.txt"
step "python3 -m convtune.verify --variants nhwc_streamk --shapes 60"
timeout 90 python3 -m convtune.verify --variants nhwc_streamk --shapes 60 --workers 15 2>&1 | tail -8
