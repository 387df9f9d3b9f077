#!/usr/bin/env bash
# Session 12, third GPU call: gpu_session12a.sh again, now with our NCHW -> channels_last copy (kernels/layout.py)
# inside nhwc_igemm and the library (checked first: tests/gpu_scripts/layout_copy.py). (1) The library on random layouts, every second key
# pinned to the kernel the rule would not pick (tests/gpu_scripts/library_layouts.py). (2) What an NCHW call
# costs on nhwc_igemm, part by part (benchmarks/probe_nchw_epilogue.py). (3) The suite's NCHW stride-1 layers:
# one run each of nhwc_igemm on the NCHW input (the copy to channels_last inside the timed call), then
# `promote.py kernel=library` on each key: the current pin (torch, on all seven) against the runs of both kernels.
# The pins file comes back as $OUT/pins.yaml. Logs under $OUT.
set -uo pipefail
source benchmarks/gpu_env.sh
step "python3 tests/gpu_scripts/layout_copy.py"
timeout 100 python3 tests/gpu_scripts/layout_copy.py 2>&1 | tail -8
step "python3 tests/gpu_scripts/library_layouts.py"
timeout 170 python3 tests/gpu_scripts/library_layouts.py 2>&1 | tail -25
step "python3 benchmarks/probe_nchw_epilogue.py"
timeout 150 python3 benchmarks/probe_nchw_epilogue.py 2>&1 | tee "$OUT/epilogue.txt" | tail -70
rm -rf /tmp/s12c; mkdir -p /tmp/s12c
DB=sqlite:////tmp/s12c/mlflow.db
PROBLEMS=alexnet_conv2,alexnet_conv3,alexnet_conv4,alexnet_conv5,vgg16_conv3_2,resnet50_layer1_1x1,resnet50_layer2_3x3
step "python3 run.py -m kernel=nhwc_igemm problem=$PROBLEMS bench.rounds=3 bench.reps=10"
timeout 150 python3 run.py -m kernel=nhwc_igemm problem=$PROBLEMS bench.rounds=3 bench.reps=10 tracking.uri=$DB \
  hydra.sweep.dir=/tmp/s12c/sweep 2>&1 | grep -v "INFO mlflow" | grep "→" | cut -c1-200
for p in ${PROBLEMS//,/ }; do
  step "python3 promote.py kernel=library problem=$p"
  timeout 60 python3 promote.py kernel=library problem=$p tracking.uri=$DB hydra.run.dir=/tmp/s12c/promote_$p 2>&1 \
    | grep -v "INFO mlflow" | grep -E "^(promote:|\||decision:|refused|error|pins file|ignoring)" | cut -c1-260
done
cp src/convtune/pins.yaml "$OUT/pins.yaml"
