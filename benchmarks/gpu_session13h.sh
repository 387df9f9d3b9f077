#!/usr/bin/env bash
# Session 13, eighth GPU call: where one nhwc_preround call's host time goes (benchmarks/probe_host_cost_nhwc.py).
# Logs under $OUT.
set -uo pipefail
source benchmarks/gpu_env.sh
step "python3 benchmarks/probe_host_cost_nhwc.py"
timeout 200 python3 benchmarks/probe_host_cost_nhwc.py 2>&1 | tail -45
