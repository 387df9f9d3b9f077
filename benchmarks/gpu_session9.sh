#!/usr/bin/env bash
# Session 9, first call. Issue 13: is stride folding worth building for L1 #50 (benchmarks/probe_fold.py)?
# Issue 11: where the batch-32 train step loses its 1 %: the stem with no autograd node, and the stem's repack
# moved to after the optimizer step (benchmarks/probe_train_gap.py --extra). Logs under $OUT.
set -uo pipefail
source benchmarks/gpu_env.sh
step "python3 benchmarks/probe_fold.py"
timeout 240 python3 benchmarks/probe_fold.py 2>&1 | grep -v "^\s*$"
step "python3 benchmarks/probe_train_gap.py --batch 32 --rounds 3 --steps 30 --extra"
timeout 240 python3 benchmarks/probe_train_gap.py --batch 32 --rounds 3 --steps 30 --extra 2>&1 | grep -v "^\s*$" | head -30
