#!/usr/bin/env bash
# Session 16, GPU calls 3-: fold_igemm's convolution in Gluon, the weight resident in shared memory, two MMA
# warpgroups in ping-pong fed by a TMA warp (benchmarks/probe_fold_gluon.py: prediction in its docstring). First a
# small batch under a short timeout (the first version hung: see _consumer's docstring), then the timing. Log under $OUT.
set -uo pipefail
source benchmarks/gpu_env.sh
step "python3 benchmarks/probe_fold_gluon.py --batch 4 --check, then --batch 256 --check"
timeout 90 python3 benchmarks/probe_fold_gluon.py --batch 4 --check 2>&1 | tee $OUT/probe_fold_gluon_check.txt | tail -5
[ "${PIPESTATUS[0]}" = 0 ] || exit 1
timeout 90 python3 benchmarks/probe_fold_gluon.py --batch 256 --check 2>&1 | tee -a $OUT/probe_fold_gluon_check.txt | tail -5
[ "${PIPESTATUS[0]}" = 0 ] || exit 1
step "python3 benchmarks/probe_fold_gluon.py"
timeout 300 python3 benchmarks/probe_fold_gluon.py 2>&1 | tee $OUT/probe_fold_gluon.txt | tail -40
