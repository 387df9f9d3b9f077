#!/usr/bin/env bash
# Session 14, third GPU call: fold_igemm, the library kernel built from probe_fold_rows/probe_fold_tma. (1) Its GPU
# check (tests/gpu_scripts/fold_igemm.py: random strided shapes, layouts, precisions, bound launches) and the GPU
# correctness command on it. (2) Configured from the tracker: sweeps on L1 #50 and the ResNet-50 stem (the suite's two
# strided layers over 3 channels) in both input layouts, then `promote.py kernel=library` on each of the four keys
# (the pin against every library kernel's runs and torch). The pins file comes back as $OUT/pins.yaml. Logs under $OUT.
set -uo pipefail
source benchmarks/gpu_env.sh
step "python3 tests/gpu_scripts/fold_igemm.py"
timeout 200 python3 tests/gpu_scripts/fold_igemm.py 2>&1 | tail -8
step "python3 -m convtune.verify --variants fold_igemm --precisions tf32,ieee --shapes 200 --seed 14 --workers 14"
timeout 200 python3 -m convtune.verify --variants fold_igemm --precisions tf32,ieee --shapes 200 --seed 14 \
  --workers 14 --max-seconds 170 --out "$OUT/verify.jsonl" 2>&1 | tail -12
python3 benchmarks/verify_counts.py "$OUT/verify.jsonl"
rm -rf /tmp/s14c; mkdir -p /tmp/s14c
DB=sqlite:////tmp/s14c/mlflow.db
sweep() {
  step "python3 run.py -m $*"
  timeout 120 python3 run.py -m "$@" bench.rounds=3 bench.reps=10 tracking.uri=$DB hydra.sweep.dir=/tmp/s14c/sweep_$RANDOM \
    2>&1 | grep -v "INFO mlflow" | grep "→" | cut -c1-170
}
sweep kernel=fold_igemm problem=kernelbench_l1_50 problem.layout=nchw,channels_last BLOCK_M=128 BLOCK_N=128 BLOCK_K=16,32 num_warps=4,8 num_stages=4
sweep kernel=fold_igemm problem=resnet50_stem problem.layout=nchw,channels_last BLOCK_M=128,256 BLOCK_N=64 BLOCK_K=16,32 num_warps=4,8 num_stages=3
for l in nchw channels_last; do
  for p in kernelbench_l1_50 resnet50_stem; do
    step "python3 promote.py kernel=library problem=$p problem.layout=$l"
    timeout 60 python3 promote.py kernel=library problem=$p problem.layout=$l tracking.uri=$DB \
      hydra.run.dir=/tmp/s14c/promote_${p}_$l 2>&1 \
      | grep -v "INFO mlflow" | grep -E "^(promote:|\||decision:|refused|error|pins file|ignoring)" | cut -c1-280
  done
done
cp src/convtune/pins.yaml "$OUT/pins.yaml"
