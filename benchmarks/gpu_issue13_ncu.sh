#!/usr/bin/env bash
# Issue 13: what bounds nhwc_igemm (run before TMA: docs/evidence/h200_issue13_ncu.txt; again with the weight
# tiles through TMA, L1 #50 added: h200_issue13_ncu_tma.txt): profile=ncu on three stride-1 layers (channels_last, their pins), on
# alexnet_conv3 through implicit_gemm (NCHW) for comparison, and on L1 #50 (implicit_gemm). Logs under $OUT.
set -uo pipefail
source benchmarks/gpu_env.sh
rm -rf /tmp/ncu13; mkdir -p /tmp/ncu13
run() {
  step "python3 run.py $* profile=ncu"
  timeout 150 python3 run.py "$@" profile=ncu tracking.uri=sqlite:////tmp/ncu13/mlflow.db hydra.run.dir=/tmp/ncu13/out \
    2>&1 | grep -v "INFO mlflow" | tail -3
}
for p in alexnet_conv3 vgg16_conv3_2 resnet50_layer2_3x3; do
  run kernel=nhwc_igemm problem.layout=channels_last problem=$p
done
run kernel=implicit_gemm problem=alexnet_conv3
run kernel=implicit_gemm problem=kernelbench_l1_50
step "NCU counters per run"
python3 - <<'PY'
from mlflow.tracking import MlflowClient
c = MlflowClient("sqlite:////tmp/ncu13/mlflow.db")
for e in c.search_experiments():
    for r in c.search_runs([e.experiment_id]):
        m, t, p = r.data.metrics, r.data.tags, r.data.params
        keys = sorted(k for k in m if k.startswith("ncu"))
        print(f"{p.get('problem')} {p.get('problem.layout')} {p.get('kernel')} {r.info.run_name} latency {m.get('latency_ms', 0):.4f} ms "
              f"regs {m.get('registers')} occupancy {m.get('occupancy_pct')} ({t.get('occupancy_limiter')}) llvm_opt {t.get('llvm_opt')} {t.get('ncu_status')}")
        for k in keys:
            print(f"    {k} = {m[k]:.4g}")
PY
