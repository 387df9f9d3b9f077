#!/usr/bin/env bash
# Issue 13, session 27, second call: nhwc_split_n (kernels/nhwc_split_n.py) on the GPU: its correctness script on random
# shapes and alexnet_conv3/conv4 (eager, CUDA graph, a caller's stream), convtune.verify on it, then its tiles swept from
# the tracker on alexnet_conv4 in both layouts and a promote of kernel=library for each key. The pins file comes back as
# $OUT/pins.yaml. Logs under $OUT.
set -uo pipefail
source benchmarks/gpu_env.sh
step "python3 tests/gpu_scripts/nhwc_split_n.py 40"
timeout 200 python3 tests/gpu_scripts/nhwc_split_n.py 40 2>&1 | grep -v Warning > "$OUT/nhwc_split_n.txt"; echo "exit ${PIPESTATUS[0]}"
grep -c "^ok " "$OUT/nhwc_split_n.txt"; grep -v "^ok " "$OUT/nhwc_split_n.txt" | cut -c1-300 | tail -12; grep "alexnet" "$OUT/nhwc_split_n.txt" | cut -c1-300
step "python3 -m convtune.verify --variants nhwc_split_n --shapes 60"
timeout 90 python3 -m convtune.verify --variants nhwc_split_n --shapes 60 --workers 15 2>&1 | grep -v "resource_tracker\|warnings.warn" | tail -8
bash benchmarks/sweep_promote.sh /tmp/t27 nhwc_split_n "alexnet_conv4 nchw" "alexnet_conv4 channels_last"
