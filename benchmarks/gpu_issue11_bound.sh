#!/usr/bin/env bash
# Issue 11, the converted model's host cost on a GPU: the gpu tests of the bound launch and the torch pin, the
# stem's host time inside ResNet-50 (eval and train), the call alone from an idle GPU, then benchmarks/drop_in.py.
# Needs .whl (bash ../shared/device/fetch-wheels.sh). Logs under $OUT (or ./out).
set -uo pipefail
source benchmarks/gpu_env.sh
step "python3 -m pytest tests/test_gpu.py -k 'bound or torch' tests/test_autograd_compile.py"
timeout 200 python3 -m pytest -q -p no:cacheprovider tests/test_gpu.py -k 'bound or torch' tests/test_autograd_compile.py 2>&1 | tail -15
step "python3 benchmarks/probe_stem_in_model.py"
timeout 120 python3 benchmarks/probe_stem_in_model.py 2>&1 | tail -8
step "python3 benchmarks/probe_host_cost.py"
timeout 60 python3 benchmarks/probe_host_cost.py 2>&1 | head -40
step "python3 benchmarks/drop_in.py --shapes 10 --batch 32 --steps ${STEPS:-100}"
timeout 240 python3 benchmarks/drop_in.py --shapes 10 --batch 32 --steps ${STEPS:-100} 2>&1
