#!/usr/bin/env bash
# Issue 13, session 22: what bounds fused_gluon with the window (its pin on L1 #50, NCHW: 2 warpgroups). The
# tracker's profile=ncu counters, then Nsight Compute's full set on one launch of the library's call
# (benchmarks/check_fused_window.py --ncu; details and raw pages under $OUT, the deciding counters printed by
# benchmarks/ncu_top.py). Logs under $OUT.
set -uo pipefail
source benchmarks/gpu_env.sh
rm -rf /tmp/ncu22; mkdir -p /tmp/ncu22
step "python3 run.py problem=kernelbench_l1_50 kernel=library profile=ncu"
timeout 200 python3 run.py problem=kernelbench_l1_50 kernel=library profile=ncu \
  tracking.uri=sqlite:////tmp/ncu22/mlflow.db hydra.run.dir=/tmp/ncu22/out 2>&1 | grep -v "INFO mlflow" | tail -3
step "NCU counters per run"
python3 benchmarks/ncu_runs.py sqlite:////tmp/ncu22/mlflow.db
NCU=$(python3 -c "from convtune.measure.ncu import find_ncu; print(find_ncu())")
step "$NCU --set full --kernel-name regex:_conv2d_fused_gluon_kernel --launch-skip 2 --launch-count 1 python3 benchmarks/check_fused_window.py --ncu"
timeout 200 "$NCU" --set full --import-source no --kernel-name "regex:_conv2d_fused_gluon_kernel" --launch-skip 2 \
  --launch-count 1 --export /tmp/ncu22/full python3 benchmarks/check_fused_window.py --ncu > "$OUT/ncu_run.txt" 2>&1
tail -3 "$OUT/ncu_run.txt"
"$NCU" --import /tmp/ncu22/full.ncu-rep --page details > "$OUT/ncu_details.txt" 2>&1
"$NCU" --import /tmp/ncu22/full.ncu-rep --page raw --csv > "$OUT/ncu_raw.csv" 2>&1
grep -E "Duration|Compute \(SM\) Throughput|Memory Throughput|Issue Slots Busy|Executed Ipc Active|Warp Cycles Per Issued|Achieved Occupancy|L1/TEX Hit|L2 Hit|Registers Per" "$OUT/ncu_details.txt" | head -20
python3 benchmarks/ncu_top.py "$OUT/ncu_raw.csv"
