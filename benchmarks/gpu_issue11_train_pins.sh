#!/usr/bin/env bash
# Issue 11: pins for training calls ("+train") decided from whole train steps of ResNet-50 at batch 32 and 128
# (benchmarks/pin_model.py --train, written into the package's pins file), then the converted model's train
# step against torch's with those pins (benchmarks/probe_train_gap.py), and the GPU tests of the module.
# Logs and the pins file under $OUT.
set -uo pipefail
source benchmarks/gpu_env.sh
step "python3 -m pytest -q tests/test_gpu.py -k 'pin or bound'"
timeout 200 python3 -m pytest -q -p no:cacheprovider tests/test_gpu.py -k 'pin or bound' 2>&1 | tail -3
for b in 32 128; do
  step "python3 benchmarks/pin_model.py --train --model resnet50 --batch $b --rounds 5 --steps 30"
  timeout 150 python3 benchmarks/pin_model.py --train --model resnet50 --batch $b --rounds 5 --steps 30 2>&1 | tail -4
done
cp src/convtune/pins.yaml "$OUT/pins.yaml"
for spec in "32 5 40" "128 3 30"; do
  set -- $spec
  step "python3 benchmarks/probe_train_gap.py --batch $1 --rounds $2 --steps $3"
  timeout 150 python3 benchmarks/probe_train_gap.py --batch $1 --rounds $2 --steps $3 2>&1 | grep -v "^\s*$" | head -13
done
