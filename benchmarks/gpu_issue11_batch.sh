#!/usr/bin/env bash
# Issue 11: the converted ResNet-50's train step against torch's at batch 32 (host-bound) and 128 (where the GPU
# should bound the step), benchmarks/probe_train_gap.py in one call. Logs under $OUT.
set -uo pipefail
source benchmarks/gpu_env.sh
for b in 32 128; do
  step "python3 benchmarks/probe_train_gap.py --batch $b --rounds 3 --steps 30"
  timeout 200 python3 benchmarks/probe_train_gap.py --batch $b --rounds 3 --steps 30 2>&1 | grep -v "^\s*$" | head -40
done
