#!/usr/bin/env bash
# Issue 11: with the "+train" pins committed (batch 32: torch; batch 128: the kernel), the converted ResNet-50's
# train step against torch's: benchmarks/probe_train_gap.py with more rounds at batch 32 (host-bound, noisy),
# then at 128, and the README's benchmarks/drop_in.py once. Logs under $OUT.
set -uo pipefail
source benchmarks/gpu_env.sh
ONLY="torch,torch twin,convtune,stem to torch"
for spec in "32 10 40" "128 3 30"; do
  set -- $spec
  step "python3 benchmarks/probe_train_gap.py --batch $1 --rounds $2 --steps $3 --only '$ONLY'"
  timeout 200 python3 benchmarks/probe_train_gap.py --batch $1 --rounds $2 --steps $3 --only "$ONLY" 2>&1 \
    | grep -v "^\s*$" | grep -v "_warn_once\|UserWarning" | head -24
done
step "python3 benchmarks/drop_in.py --shapes 2 --batch 32 --steps 150"
timeout 200 python3 benchmarks/drop_in.py --shapes 2 --batch 32 --steps 150 2>&1 | grep -v "^\s*$" | tail -12
