#!/usr/bin/env bash
# Session 16, last GPU call: Nsight Compute on the library's fold_igemm convolution and on the Gluon ping-pong one
# (benchmarks/probe_fold_gluon.py --check: its first variant, 7 stages, one ring), L1 #50; the library's one-image check
# launch is skipped. Then the shared-memory and tensor-pipe metrics this ncu offers, and those on both kernels. Log under $OUT.
set -uo pipefail
source benchmarks/gpu_env.sh
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda*/bin/ncu 2>/dev/null | tail -1)
step "ncu: _conv2d_fold_kernel (library, M128-N64+32-K32-w4-s4) and _conv_fold_pingpong (Gluon), one launch each"
timeout 400 $NCU --clock-control none --kernel-name 'regex:_conv2d_fold_kernel|_conv_fold_pingpong' --launch-skip 1 --launch-count 2 \
  --section SpeedOfLight --section Occupancy --section LaunchStats --section MemoryWorkloadAnalysis \
  --section MemoryWorkloadAnalysis_Tables --section ComputeWorkloadAnalysis --section WarpStateStats \
  python3 benchmarks/probe_fold_gluon.py --batch 256 --check > $OUT/ncu_gluon.txt 2>&1
$NCU --query-metrics 2>/dev/null | grep -E "^(l1tex__data_pipe_lsu_wavefronts_mem_shared|sm__pipe_shared_cycles_active|sm__pipe_tensor_op_gmma_cycles_active|sm__pipe_tensor_op_hmma_cycles_active|l1tex__data_bank_conflicts_pipe_lsu_mem_shared|smsp__average_warps_issue_stalled)" \
  | awk '{print $1}' > $OUT/metrics.txt
cat $OUT/metrics.txt
M=$(grep -E "^(sm__pipe_shared_cycles_active|sm__pipe_tensor_op_gmma_cycles_active|l1tex__data_pipe_lsu_wavefronts_mem_shared)$" $OUT/metrics.txt \
  | sed 's/$/.avg.pct_of_peak_sustained_active/' | paste -sd, -)
[ -n "$M" ] && timeout 300 $NCU --clock-control none --kernel-name 'regex:_conv2d_fold_kernel|_conv_fold_pingpong' --launch-skip 1 \
  --launch-count 2 --metrics "$M" python3 benchmarks/probe_fold_gluon.py --batch 256 --check > $OUT/ncu_gluon_metrics.txt 2>&1
grep -E "_kernel|_pingpong|pct" $OUT/ncu_gluon_metrics.txt
grep -v "^    ---\|^==PROF==" $OUT/ncu_gluon.txt | grep -E "_kernel|_pingpong|Throughput|Duration|Occupancy|Registers|Block Limit|Warp Cycles|Eligible|Issued Warp|No Eligible|Executed Ipc|Mem Busy|Max Bandwidth|L2 Hit|Shared|Pipe|Tensor|stall|Stall" | head -120
