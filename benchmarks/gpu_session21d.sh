#!/usr/bin/env bash
# Issue 13, session 21: the three-row fused_gluon variant with its NCHW output stored 32 columns of one channel a warp
# (benchmarks/probe_fused_window.py --store; with most of its stores removed it ran 0.207 ms against 0.317, --ablate),
# then the same stores in the library's kernel as it is, one row a warpgroup (--library-store). Each variant's output
# against the library's and the judge's allclose, and its time next to the library's call. Logs under $OUT.
set -uo pipefail
source benchmarks/gpu_env.sh
step "python3 benchmarks/probe_fused_window.py --store"
timeout 200 python3 benchmarks/probe_fused_window.py --store 2>&1 | tee "$OUT/store.txt" | grep -v Warning
step "python3 benchmarks/probe_fused_window.py --library-store"
timeout 250 python3 benchmarks/probe_fused_window.py --library-store 2>&1 | tee "$OUT/library_store.txt" | grep -v Warning
