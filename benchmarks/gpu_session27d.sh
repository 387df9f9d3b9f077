#!/usr/bin/env bash
# Issue 13, session 27, fourth call: nhwc_split_n's tiles swept from the tracker on alexnet_conv3 in both layouts and a
# promote of kernel=library for each key (the pins file comes back as $OUT/pins.yaml), then what bounds it on
# alexnet_conv4 NCHW (its pin): profile=ncu, which profiles a call's first launch (the 256-wide tiles), next to
# nhwc_preround at the former pin's tile. Logs under $OUT.
set -uo pipefail
source benchmarks/gpu_env.sh
bash benchmarks/sweep_promote.sh /tmp/t27d nhwc_split_n "alexnet_conv3 nchw" "alexnet_conv3 channels_last"
rm -rf /tmp/ncu27; mkdir -p /tmp/ncu27
for spec in "nhwc_split_n 128 256 8 4" "nhwc_preround 128 128 4 3"; do
  set -- $spec
  step "python3 run.py problem=alexnet_conv4 problem.layout=nchw kernel=$1 profile=ncu (M$2-N$3-K32-w$4-s$5)"
  timeout 150 python3 run.py problem=alexnet_conv4 problem.layout=nchw kernel=$1 profile=ncu BLOCK_M=$2 BLOCK_N=$3 \
    BLOCK_K=32 num_warps=$4 num_stages=$5 tracking.uri=sqlite:////tmp/ncu27/mlflow.db hydra.run.dir=/tmp/ncu27/out_$1 \
    2>&1 | grep -v "INFO mlflow" | tail -3
done
step "NCU counters per run"
python3 benchmarks/ncu_runs.py sqlite:////tmp/ncu27/mlflow.db 2>&1 | tee "$OUT/ncu_runs.txt"
