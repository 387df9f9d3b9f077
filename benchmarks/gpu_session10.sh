#!/usr/bin/env bash
# Session 10 (issue 11), last call: the GPU tests of the module (weight-normed layers, convert's
# leave_torch_layers), then one converted ResNet-50 timed per step with its convolutions taking turns as torch's
# class, ours, and ours with the layers that leave_torch_layers leaves as torch's (benchmarks/train_step_ab.py).
# Earlier calls of this session: docs/evidence/h200_issue11_ab_first.txt (overhead.py before/after, the first
# A/B with copies of the model, resnet50_layer1_1x1 at tf32x3/ieee), h200_issue11_module_host.txt
# (benchmarks/probe_module_host.py, the A/B at batch 32 before and after the forward was slimmed). Logs under $OUT.
set -uo pipefail
source benchmarks/gpu_env.sh
step "python3 -m pytest -q tests/test_gpu.py -k 'pin or bound or leaves'"
timeout 200 python3 -m pytest -q -p no:cacheprovider tests/test_gpu.py -k 'pin or bound or leaves' 2>&1 | tail -3
step "python3 benchmarks/train_step_ab.py --batch 32 128 --turns 300"
timeout 380 python3 benchmarks/train_step_ab.py --batch 32 128 --turns 300 2>&1 | grep -v "^\s*$" | grep -v "Warning\|warn"
