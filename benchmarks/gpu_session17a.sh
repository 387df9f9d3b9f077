#!/usr/bin/env bash
# Session 17, GPU call 1: L1 #50 with the fold fused away (benchmarks/probe_fused_gluon.py: prediction in its
# docstring; this call ran its first version, see docs/evidence/h200_issue13_fused_gluon.txt). A small batch under a
# short timeout first (a Gluon kernel that hangs costs 90 s, not the call), then the batch of 256, then the timings
# beside the library and session 16's fold + Gluon kernel. Log under $OUT.
set -uo pipefail
source benchmarks/gpu_env.sh
step "python3 benchmarks/probe_fused_gluon.py --batch 4 --check, then --batch 256 --check"
timeout 90 python3 benchmarks/probe_fused_gluon.py --batch 4 --check 2>&1 | tee $OUT/probe_fused_gluon_check.txt | tail -5
[ "${PIPESTATUS[0]}" = 0 ] || exit 1
timeout 120 python3 benchmarks/probe_fused_gluon.py --batch 256 --check 2>&1 | tee -a $OUT/probe_fused_gluon_check.txt | tail -5
[ "${PIPESTATUS[0]}" = 0 ] || exit 1
step "python3 benchmarks/probe_fused_gluon.py"
timeout 300 python3 benchmarks/probe_fused_gluon.py 2>&1 | tee $OUT/probe_fused_gluon.txt | tail -40
