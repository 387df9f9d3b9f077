#!/usr/bin/env bash
# Session 12, second GPU call: our NCHW -> channels_last copy (kernels/layout.py). Bit-for-bit against torch's on
# random shapes, tiles and offsets (tests/gpu_scripts/layout_copy.py), then timed against torch's at every tile
# on the suite's inputs (benchmarks/probe_layout_copy.py). Logs under $OUT.
set -uo pipefail
source benchmarks/gpu_env.sh
step "python3 tests/gpu_scripts/layout_copy.py"
timeout 150 python3 tests/gpu_scripts/layout_copy.py 2>&1 | tail -12
step "python3 benchmarks/probe_layout_copy.py"
timeout 300 python3 benchmarks/probe_layout_copy.py 2>&1 | tail -40
