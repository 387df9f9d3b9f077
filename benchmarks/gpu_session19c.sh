#!/usr/bin/env bash
# Issue 13, session 19: nchw_1x1 from the tracker on resnet50_layer1_1x1 with an NCHW input: a sweep of its tiles, a
# promote of kernel=library for the key (nchw_1x1's runs against the key's torch pin), then the library, nchw_1x1,
# implicit_gemm and nhwc_igemm side by side with cuDNN. The pins file comes back as $OUT/pins.yaml. Logs under $OUT.
set -uo pipefail
source benchmarks/gpu_env.sh
rm -rf /tmp/t19; mkdir -p /tmp/t19
db="tracking.uri=sqlite:////tmp/t19/mlflow.db"
step "python3 run.py -m kernel=nchw_1x1 problem=resnet50_layer1_1x1 problem.layout=nchw BLOCK_M=64,128 BLOCK_N=64 BLOCK_K=32,64 num_warps=4,8 num_stages=2,3"
timeout 200 python3 run.py -m kernel=nchw_1x1 problem=resnet50_layer1_1x1 problem.layout=nchw BLOCK_M=64,128 \
  BLOCK_N=64 BLOCK_K=32,64 num_warps=4,8 num_stages=2,3 $db hydra.sweep.dir=/tmp/t19/sweep 2>&1 \
  | grep -v "INFO mlflow" | tail -22
step "python3 promote.py problem=resnet50_layer1_1x1 kernel=library problem.layout=nchw"
timeout 120 python3 promote.py problem=resnet50_layer1_1x1 kernel=library problem.layout=nchw $db 2>&1 \
  | grep -v "INFO mlflow" | tail -60
cp src/convtune/pins.yaml "$OUT/pins.yaml"
step "python3 run.py -m problem=resnet50_layer1_1x1 kernel=library,nchw_1x1,implicit_gemm,nhwc_igemm problem.layout=nchw"
timeout 150 python3 run.py -m problem=resnet50_layer1_1x1 kernel=library,nchw_1x1,implicit_gemm,nhwc_igemm \
  problem.layout=nchw $db hydra.sweep.dir=/tmp/t19/side 2>&1 | grep -v "INFO mlflow" | tail -14
