#!/usr/bin/env bash
# Issue 13, session 18, after fused_gluon's promote (gpu_session18a.sh): the KernelBench export of L1 #50 with
# kernel=library (now fused_gluon's file), judged by KernelBench's own harness; the library's L1 #50 in both layouts
# against cuDNN's two layouts (the README's table row), with fold_igemm and fused_gluon runs side by side; a promote
# of kernel=library on the NCHW key, whose contest re-times fused_gluon (the pin), fold_igemm and cuDNN head to head.
# Logs under $OUT.
set -uo pipefail
source benchmarks/gpu_env.sh
rm -rf /tmp/t18b; mkdir -p /tmp/t18b
source benchmarks/gpu_export_judge.sh /tmp/t18b
DB=sqlite:////tmp/t18b/mlflow.db
step "python3 run.py -m problem=kernelbench_l1_50 kernel=library,fold_igemm,fused_gluon problem.layout=nchw,channels_last"
timeout 200 python3 run.py -m problem=kernelbench_l1_50 kernel=library,fold_igemm,fused_gluon \
  problem.layout=nchw,channels_last tracking.uri=$DB hydra.sweep.dir=/tmp/t18b/sweep 2>&1 | grep -v "INFO mlflow" \
  | grep -E "^\[|^\|" | tail -20
step "the runs' cuDNN baselines and ours (MLflow)"
python3 - <<'PY'
from mlflow.tracking import MlflowClient
c = MlflowClient("sqlite:////tmp/t18b/mlflow.db")
for e in c.search_experiments():
    for r in c.search_runs([e.experiment_id]):
        m, t, p = r.data.metrics, r.data.tags, r.data.params
        if "latency_ms" in m:
            print(t.get("kernel"), "channels_last" if "channels_last" in p.get("problem_key", "") else "nchw", {k: round(v, 4) for k, v in sorted(m.items())
                  if any(s in k for s in ("_ms", "tflops", "floor", "speedup")) and not k.startswith("ncu")})
PY
step "python3 promote.py problem=kernelbench_l1_50 kernel=library problem.layout=nchw"
timeout 120 python3 promote.py problem=kernelbench_l1_50 kernel=library problem.layout=nchw tracking.uri=$DB \
  2>&1 | grep -v "INFO mlflow" | grep -E "^promote|^\||^decision|^refused" | cut -c1-300
