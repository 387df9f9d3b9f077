#!/usr/bin/env bash
# Session 17, GPU calls 2-4: the fused Gluon kernel's variants (benchmarks/probe_fused_gluon.py VARIANTS), checked at
# batch 4 under a short timeout (a Gluon kernel that hangs costs 90 s, not the call) and at 256, timed beside the
# library and session 16's fold + Gluon, then Nsight Compute on one launch of each variant. The probe changed between
# the calls (docs/evidence/h200_issue13_fused_gluon.txt names each call's variants); the NCU launch count follows its
# VARIANTS (7, 8 and 5 then). Log under $OUT.
set -uo pipefail
source benchmarks/gpu_env.sh
step "python3 benchmarks/probe_fused_gluon.py --batch 4 --check, then --batch 256 --check"
timeout 90 python3 benchmarks/probe_fused_gluon.py --batch 4 --check 2>&1 | tee $OUT/probe_fused_gluon_check.txt | tail -8
[ "${PIPESTATUS[0]}" = 0 ] || exit 1
timeout 120 python3 benchmarks/probe_fused_gluon.py --batch 256 --check 2>&1 | tee -a $OUT/probe_fused_gluon_check.txt | tail -8
[ "${PIPESTATUS[0]}" = 0 ] || exit 1
step "python3 benchmarks/probe_fused_gluon.py"
timeout 300 python3 benchmarks/probe_fused_gluon.py 2>&1 | tee $OUT/probe_fused_gluon.txt | tail -40
N=$(grep -c "^batch 256" $OUT/probe_fused_gluon_check.txt)
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda*/bin/ncu 2>/dev/null | tail -1)
step "ncu: _conv_fused, one launch of each of the $N variants (--batch 256 --check)"
timeout 200 $NCU --clock-control none --kernel-name _conv_fused --launch-count "$N" \
  --section SpeedOfLight --section Occupancy --section LaunchStats --section MemoryWorkloadAnalysis \
  --section ComputeWorkloadAnalysis --section WarpStateStats --section SourceCounters \
  python3 benchmarks/probe_fused_gluon.py --batch 256 --check > $OUT/ncu_fused.txt 2>&1
grep -v "^    ---\|^==PROF==" $OUT/ncu_fused.txt | grep -E "_conv_fused|Duration|Shared Memory Configuration Size|Throughput|Hit Rate|Issue Slots Busy|Issued Ipc|No Eligible|Warp Cycles Per Issued|Eligible Warps|L1TEX|Stall|stall" | head -150
