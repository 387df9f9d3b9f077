#!/usr/bin/env bash
# Issue 11, train mode: the stem's weight repacked in one launch (kernels/weight_pack.py) instead of four torch
# operations. Prediction, written before the run: the stem's packed_weight host time in a train step drops from
# 331 µs to under 60; the converted model's train step goes from 1.014x torch (probe_train_gap median) to the
# level of 'stem to torch' (about 1.003x) or below; eval is unchanged (nothing is repacked there).
# Checks first: the weight pack and the bound launch compiled (bitwise against the torch pack), then the
# library kernel on 300 random shapes. Needs .whl (bash ../shared/device/fetch-wheels.sh). Logs under $OUT.
set -uo pipefail
source benchmarks/gpu_env.sh
step "python3 -m pytest tests/test_gpu.py -k 'bound or torch'"
timeout 150 python3 -m pytest -q -p no:cacheprovider tests/test_gpu.py -k 'bound or torch' 2>&1 | tail -4
step "python3 -m convtune.verify --variants implicit_gemm --shapes 300 --workers 15 --max-seconds 150"
timeout 200 python3 -m convtune.verify --variants implicit_gemm --shapes 300 --workers 15 --max-seconds 150 2>&1 | grep -v "^note" | tail -6
step "python3 benchmarks/probe_train_timeline.py (last line: the stem's host time in parts)"
timeout 150 python3 benchmarks/probe_train_timeline.py 2>&1 | tail -1
step "python3 benchmarks/probe_train_gap.py --rounds 5 --steps 60"
timeout 200 python3 benchmarks/probe_train_gap.py --rounds 5 --steps 60 2>&1 | grep -v -i warn | head -14
step "python3 benchmarks/drop_in.py --shapes 2 --batch 32 --steps 150"
timeout 150 python3 benchmarks/drop_in.py --shapes 2 --batch 32 --steps 150 2>&1 | grep -E "median ms per step|stem conv1|layouts:"
