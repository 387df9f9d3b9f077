#!/usr/bin/env bash
# Session 15, GPU call after the nhwc kernels' `tf32` started breaking TF32 ties to even (cuDNN's rule on the stride-1
# layers, benchmarks/probe_tie_rule.py): (1) the GPU scripts of the changed paths (layout copies, bound nhwc launches,
# the library's layouts); (2) the correctness command on nhwc_igemm and nhwc_preround at tf32; (3) the suite against
# cuDNN (+experiment=vs_cudnn, gpu_issue13_table.sh); (4) promote.py kernel=library on the keys whose contests had no
# contender passing the judge (resnet50_layer1_1x1 and alexnet_conv2, both layouts) from the table's runs. The pins file
# comes back as $OUT/pins.yaml. Logs under $OUT.
set -uo pipefail
source benchmarks/gpu_env.sh
source benchmarks/gpu_nhwc_checks.sh "layout_copy bound_nhwc library_layouts"
bash benchmarks/gpu_issue13_table.sh 2>&1 | grep -v "^NVIDIA H200\|^torch 2" | grep -v "HYDRA\] \|^\[[0-9]*/45\]" | tee $OUT/vs_cudnn.txt
for l in nchw channels_last; do
  for p in resnet50_layer1_1x1 alexnet_conv2; do
    step "python3 promote.py kernel=library problem=$p problem.layout=$l"
    timeout 60 python3 promote.py kernel=library problem=$p problem.layout=$l tracking.uri=sqlite:////tmp/vs/mlflow.db \
      hydra.run.dir=/tmp/vs/promote_${p}_$l 2>&1 \
      | grep -v "INFO mlflow" | grep -E "^(promote:|\||decision:|refused|error|pins file|ignoring)" | cut -c1-280
  done
done 2>&1 | tee $OUT/promote.txt
cp src/convtune/pins.yaml "$OUT/pins.yaml"
