#!/usr/bin/env bash
# Issue 13, session 20: nchw_igemm from the tracker. Its GPU script again (its tolerance now grows with the sum's length,
# after 20b's one case at 1.11e-5), sweeps of its tiles on vgg16_conv3_2 and resnet50_layer2_3x3 with an NCHW input,
# a promote of kernel=library for each key (the runs of every library kernel for the key against its current
# choice), then the whole suite against cuDNN in both layouts (+experiment=vs_cudnn) with the pins that come out: the
# README's table from one run. The pins file comes back as $OUT/pins.yaml. Logs under $OUT.
set -uo pipefail
source benchmarks/gpu_env.sh
step "python3 tests/gpu_scripts/nchw_igemm.py"
timeout 200 python3 tests/gpu_scripts/nchw_igemm.py 2>&1 | tail -6
rm -rf /tmp/t20; mkdir -p /tmp/t20
db="tracking.uri=sqlite:////tmp/t20/mlflow.db"
for p in vgg16_conv3_2 resnet50_layer2_3x3; do
  if [ $p = vgg16_conv3_2 ]; then
    cfg='[{BLOCK_M: 64, BLOCK_N: 256, BLOCK_K: 32, num_warps: 4, num_stages: 3}, {BLOCK_M: 128, BLOCK_N: 256, BLOCK_K: 32, num_warps: 8, num_stages: 3}, {BLOCK_M: 64, BLOCK_N: 256, BLOCK_K: 64, num_warps: 4, num_stages: 3}]'
  else
    cfg='[{BLOCK_M: 128, BLOCK_N: 128, BLOCK_K: 16, num_warps: 4, num_stages: 3}, {BLOCK_M: 128, BLOCK_N: 128, BLOCK_K: 32, num_warps: 4, num_stages: 3}, {BLOCK_M: 64, BLOCK_N: 128, BLOCK_K: 32, num_warps: 4, num_stages: 3}]'
  fi
  step "python3 run.py -m kernel=nchw_igemm problem=$p problem.layout=nchw (three tiles)"
  timeout 120 python3 run.py -m kernel=nchw_igemm problem=$p problem.layout=nchw "hydra.sweeper.configs=$cfg" \
    $db hydra.sweep.dir=/tmp/t20/sweep_$p 2>&1 | grep -v "INFO mlflow" | tail -6
  step "python3 promote.py problem=$p kernel=library problem.layout=nchw"
  timeout 120 python3 promote.py problem=$p kernel=library problem.layout=nchw $db > /tmp/t20/promote_$p.txt 2>&1
  grep -E "^promote:|^\||^decision|rror" /tmp/t20/promote_$p.txt | cut -c1-300
done
cp src/convtune/pins.yaml "$OUT/pins.yaml"
bash benchmarks/gpu_issue13_table.sh 2>&1 | grep -v "HYDRA\] \|^\[[0-9]*/45\]" | tee "$OUT/vs_cudnn.txt" | tail -40
