#!/usr/bin/env bash
# Issue 13, session 21: where the three-row fused_gluon variant's time goes (benchmarks/probe_fused_window.py): the
# variant timed next to itself without most of its stores and without its gathers, then Nsight Compute's full set on
# one launch of it and of the library's fused_gluon (details and raw pages under $OUT).
set -uo pipefail
source benchmarks/gpu_env.sh
step "python3 benchmarks/probe_fused_window.py --ablate"
timeout 200 python3 benchmarks/probe_fused_window.py --ablate 2>&1 | tee "$OUT/ablate.txt" | grep -v Warning
NCU=$(python3 -c "from convtune.measure.ncu import find_ncu; print(find_ncu())")
for spec in "3,2,2 _conv2d_window_kernel 1" "lib _conv2d_fused_gluon_kernel 2"; do
  set -- $spec
  step "$NCU --set full --kernel-name regex:$2 --launch-skip $3 --launch-count 1 python3 benchmarks/probe_fused_window.py --only $1"
  timeout 150 "$NCU" --set full --import-source no --kernel-name "regex:$2" --launch-skip "$3" --launch-count 1 \
    --export "/tmp/ncu_$2" python3 benchmarks/probe_fused_window.py --only "$1" > "$OUT/ncu_run_$2.txt" 2>&1
  tail -3 "$OUT/ncu_run_$2.txt"
  "$NCU" --import "/tmp/ncu_$2.ncu-rep" --page details > "$OUT/ncu_details_$2.txt" 2>&1
  "$NCU" --import "/tmp/ncu_$2.ncu-rep" --page raw --csv > "$OUT/ncu_raw_$2.csv" 2>&1
  grep -E "Duration|Compute \(SM\) Throughput|Memory Throughput|Issue Slots Busy|Executed Ipc Active|Warp Cycles Per Issued|Achieved Occupancy|L1/TEX Hit|L2 Hit|Registers Per" "$OUT/ncu_details_$2.txt" | head -20
done
