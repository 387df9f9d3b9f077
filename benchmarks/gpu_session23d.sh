#!/usr/bin/env bash
# Issue 13, session 23 (debugging): benchmarks/debug_split.py, the split last wave's wrong case (benchmarks/
# nhwc_split_probe.py) with and without the barrier after the count, and with one thing of the case changed. Log under
# $OUT. (Its earlier runs in this session had other edits: the script's docstring lists them.)
set -uo pipefail
source benchmarks/gpu_env.sh
step "python3 benchmarks/debug_split.py"
timeout 400 python3 benchmarks/debug_split.py 2>&1 | tee "$OUT/debug.txt" | grep -v Warning
