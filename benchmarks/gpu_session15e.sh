#!/usr/bin/env bash
# Session 15, GPU call after the nhwc kernels' ties-to-even rounding became PTX's cvt.rn.tf32.f32 where compiled
# (gpu_session15d and probe_round_cost.py: the integer version cost nhwc_igemm 4-7 %). (1) The compiled roundings
# against the host's (tests/gpu_scripts/rounding.py) and the GPU scripts of the paths that round; (2) the correctness
# command on nhwc_igemm and nhwc_preround at tf32; (3) probe_round_cost.py on this source
# (even = the PTX instruction now), with the integer ties to even (bits) and with ties away; (4) the suite against cuDNN. Logs under $OUT.
set -uo pipefail
source benchmarks/gpu_env.sh
source benchmarks/gpu_nhwc_checks.sh "rounding layout_copy bound_nhwc library_layouts"
step "python3 benchmarks/probe_round_cost.py --rounding even|bits|away, twice"
for r in even bits away even bits away; do timeout 90 python3 benchmarks/probe_round_cost.py --rounding $r 2>&1 | tail -3; done \
  | tee $OUT/round_cost.txt
bash benchmarks/gpu_issue13_table.sh 2>&1 | grep -v "^NVIDIA H200\|^torch 2" | grep -v "HYDRA\] \|^\[[0-9]*/45\]" | tee $OUT/vs_cudnn.txt
