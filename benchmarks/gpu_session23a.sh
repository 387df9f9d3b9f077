#!/usr/bin/env bash
# Issue 13, session 23: does the last wave of tiles cost the stride-1 layers under 0.9x? benchmarks/probe_waves.py:
# each pinned nhwc kernel alone on a channels_last input at batches from half the problem's to all of it, next to
# cuDNN channels_last at the same batches. Log under $OUT.
set -uo pipefail
source benchmarks/gpu_env.sh
step "python3 benchmarks/probe_waves.py"
timeout 500 python3 benchmarks/probe_waves.py 2>&1 | tee "$OUT/waves.txt" | grep -v Warning
