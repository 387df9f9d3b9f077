#!/usr/bin/env bash
# Issue 13, session 27, third call: nhwc_split_n after its host path changed (the second launch past Triton's dispatch on
# its stream, the fork and join on two reused events, the weight descriptors made once): its correctness script again,
# the host cost of a call next to nhwc_preround's and torch's (benchmarks/probe_host_split_n.py), convtune.verify on it,
# then the sweeps and promotes of alexnet_conv4 in both layouts from the repository's pins. The pins file comes back as
# $OUT/pins.yaml. Logs under $OUT.
set -uo pipefail
source benchmarks/gpu_env.sh
step "python3 tests/gpu_scripts/nhwc_split_n.py 40"
timeout 200 python3 tests/gpu_scripts/nhwc_split_n.py 40 2>&1 | grep -v Warning > "$OUT/nhwc_split_n.txt"; echo "exit ${PIPESTATUS[0]}"
grep -c "^ok " "$OUT/nhwc_split_n.txt"; grep -v "^ok " "$OUT/nhwc_split_n.txt" | cut -c1-300 | tail -6; grep "alexnet" "$OUT/nhwc_split_n.txt" | cut -c1-200
step "python3 benchmarks/probe_host_split_n.py"
timeout 100 python3 benchmarks/probe_host_split_n.py 2>&1 | grep -v Warning | tee "$OUT/probe_host_split_n.txt"
bash benchmarks/sweep_promote.sh /tmp/t27c nhwc_split_n "alexnet_conv4 nchw" "alexnet_conv4 channels_last"
step "python3 -m convtune.verify --variants nhwc_split_n --shapes 60"
timeout 200 python3 -m convtune.verify --variants nhwc_split_n --shapes 60 --workers 15 2>&1 | grep -v "resource_tracker\|warnings.warn" | tail -8
