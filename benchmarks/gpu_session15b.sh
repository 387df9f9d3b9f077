#!/usr/bin/env bash
# Session 15, second GPU call: fold_igemm with the tiled fold (_fold_rows_kernel; gpu_session15a's probe timed it at
# 0.080 ms against 0.100 for the elementwise fold). (1) benchmarks/probe_fold_library.py on this source (the library's
# fold and call). (2) gpu_session14c.sh again: the GPU check, the correctness command, the sweeps on L1 #50 and the
# ResNet-50 stem in both layouts and the four promotes (kernel=library), so that the pins name this source. The pins
# file comes back as $OUT/pins.yaml. Logs under $OUT.
set -uo pipefail
source benchmarks/gpu_env.sh
step "python3 benchmarks/probe_fold_library.py"
timeout 120 python3 benchmarks/probe_fold_library.py 2>&1 | tee "$OUT/fold_library.txt" | tail -14
bash benchmarks/gpu_session14c.sh 2>&1 | grep -v "^NVIDIA H200\|^torch 2" | tee "$OUT/session14c_again.txt"
