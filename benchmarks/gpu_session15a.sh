#!/usr/bin/env bash
# Session 15, first GPU call: (1) the KernelBench export of L1 #50 with kernel=library, now fold_igemm, checked the
# tracker's way and by KernelBench's own eval_kernel_against_ref (.kb/, see gpu_issue8.sh); (2) NCU on fold_igemm
# (the tracker's profile=ncu, then Nsight Compute's sections on both of its kernels); (3) the fold-overlap probe.
# Logs under $OUT (each step tee'd).
set -uo pipefail
source benchmarks/gpu_env.sh
rm -rf /tmp/s15a; mkdir -p /tmp/s15a
source benchmarks/gpu_export_judge.sh /tmp/s15a
{
step "python3 run.py kernel=fold_igemm problem=kernelbench_l1_50 profile=ncu"
timeout 200 python3 run.py kernel=fold_igemm problem=kernelbench_l1_50 profile=ncu tracking.uri=sqlite:////tmp/s15a/mlflow.db \
  hydra.run.dir=/tmp/s15a/ncu 2>&1 | grep -v "INFO mlflow" | tail -6
python3 - <<'PY'
from mlflow.tracking import MlflowClient
c = MlflowClient("sqlite:////tmp/s15a/mlflow.db")
for e in c.search_experiments():
    for r in c.search_runs([e.experiment_id]):
        print(r.info.run_name, {k: v for k, v in sorted(r.data.metrics.items()) if k.startswith("ncu.") or k in ("latency_ms",)},
              {k: v for k, v in r.data.tags.items() if "ncu" in k})
PY
step "ncu sections on fold_igemm's two kernels (fold, then convolution), L1 #50, M128-N128-K32-w4-s4"
JOB=$(python3 -c "import dataclasses, json, sys; sys.path.insert(0, 'benchmarks'); from probe_kernels import load_problem; \
p = load_problem('kernelbench_l1_50'); print(json.dumps({'problem': dataclasses.asdict(p), 'kernel': 'fold_igemm', \
'meta': dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=32, num_warps=4, num_stages=4), 'precision': 'tf32', 'seed': 0}))")
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda*/bin/ncu 2>/dev/null | tail -1)
CONVTUNE_LLVM_OPT=O3 timeout 240 $NCU --clock-control none --kernel-name 'regex:_fold_kernel|_conv2d_fold_kernel' \
  --launch-count 2 --section SpeedOfLight --section Occupancy --section LaunchStats --section MemoryWorkloadAnalysis \
  --section ComputeWorkloadAnalysis --section WarpStateStats --section SchedulerStats \
  python3 -m convtune.profile_one "$JOB" > $OUT/ncu_fold_igemm.txt 2>&1
grep -v "^    ---\|^==PROF==" $OUT/ncu_fold_igemm.txt | grep -E "_kernel|Throughput|Duration|Occupancy|Registers|Shared Memory Config|Block Limit|Warp Cycles|Eligible|Issued Warp|No Eligible|Executed Ipc|Mem Busy|Max Bandwidth|L1/TEX Hit|L2 Hit|Waves" | head -90
} 2>&1 | tee $OUT/ncu.txt
step "python3 benchmarks/probe_fold_overlap.py"
timeout 200 python3 benchmarks/probe_fold_overlap.py 2>&1 | tee $OUT/probe_fold_overlap.txt | tail -30
