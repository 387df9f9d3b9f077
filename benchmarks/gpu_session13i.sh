#!/usr/bin/env bash
# Session 13, ninth GPU call: the nhwc kernels and the layout copies launched past Triton's per-call dispatch once a
# binary has run (kernels.common.bound_runner). (1) Bit for bit against the first (dispatched) call on random shapes
# (tests/gpu_scripts/bound_nhwc.py) and the library's routes (tests/gpu_scripts/library_layouts.py). (2) The host
# time of an nhwc_preround call again (benchmarks/probe_host_cost_nhwc.py). (3) gpu_session13d.sh's sweeps and
# promotes again: the contest's idle-GPU timing now sees the bound launches. The pins file comes back as
# $OUT/pins.yaml. Logs under $OUT.
set -uo pipefail
source benchmarks/gpu_env.sh
step "python3 tests/gpu_scripts/bound_nhwc.py"
timeout 120 python3 tests/gpu_scripts/bound_nhwc.py 2>&1 | tail -12
step "python3 tests/gpu_scripts/library_layouts.py"
timeout 150 python3 tests/gpu_scripts/library_layouts.py 2>&1 | tail -14
step "python3 benchmarks/probe_host_cost_nhwc.py"
timeout 60 python3 benchmarks/probe_host_cost_nhwc.py 2>&1 | head -9
bash benchmarks/gpu_session13d.sh 2>&1 | grep -v "^NVIDIA H200\|^torch 2" | grep -v "^\[" | grep -v "^sweep:"
