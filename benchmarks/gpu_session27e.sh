#!/usr/bin/env bash
# Issue 13, session 27, last call: the library's layouts script (convtune.conv2d and convtune.nn.Conv2d on random shapes,
# both layouts, with gradients; every second key pinned to another library kernel, nhwc_split_n among them). Logs under $OUT.
set -uo pipefail
source benchmarks/gpu_env.sh
step "python3 tests/gpu_scripts/library_layouts.py"
timeout 400 python3 tests/gpu_scripts/library_layouts.py 2>&1 | grep -v Warning | tee "$OUT/library_layouts.txt" | tail -30
echo "exit ${PIPESTATUS[0]}"
