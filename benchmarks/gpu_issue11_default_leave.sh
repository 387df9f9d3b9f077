#!/usr/bin/env bash
# Issue 11: convert(model, example_input) now leaves the layers that run torch for the example to torch by
# default. The module's GPU tests, then the README's drop-in benchmark (benchmarks/drop_in.py, which converts
# with an example input, so with the default) at batch 32. Logs under $OUT.
set -uo pipefail
source benchmarks/gpu_env.sh
step "python3 -m pytest -q tests/test_gpu.py -k 'pin or bound or leaves'"
timeout 200 python3 -m pytest -q -p no:cacheprovider tests/test_gpu.py -k 'pin or bound or leaves' 2>&1 | tail -3
step "python3 benchmarks/drop_in.py --shapes 20 --batch 32 --steps 100"
timeout 300 python3 benchmarks/drop_in.py --shapes 20 --batch 32 --steps 100 2>&1 | grep -v "^\s*$" | grep -Ev "^  (conv1|layer[0-9])[a-z0-9_.]* +rel L2"
