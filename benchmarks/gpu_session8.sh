#!/usr/bin/env bash
# One GPU call for three things (2026-11-22, eighth session); logs under $OUT.
# 1. Issue 12: hydra/launcher=slurm_local on the GPU, with the submitting process shown no GPU
#    (CUDA_VISIBLE_DEVICES=''): submitit's local executor gives each job GPU 0, and each job resolves the device.
# 2. Issue 13: benchmarks/probe_nhwc.py, the channels_last kernel on the stride-1 layers vs cuDNN.
# 3. Issue 11: the train-step probe at batch 32 and 128 (is the step GPU-bound at 128?).
set -uo pipefail
source benchmarks/gpu_env.sh
step "issue 12: slurm_local, submitter without a GPU"
CUDA_VISIBLE_DEVICES= python3 -c "import torch; print('submitting process sees a GPU:', torch.cuda.is_available())"
rm -rf /tmp/sl; mkdir -p /tmp/sl
CUDA_VISIBLE_DEVICES= timeout 240 python3 run.py -m hydra/launcher=slurm_local BLOCK_M=64,128 num_warps=4 \
  tracking.uri=sqlite:////tmp/sl/mlflow.db hydra.sweep.dir=/tmp/sl/sweep 2>&1 | grep -v "INFO mlflow" | tail -12
python3 - <<'PY'
from mlflow.tracking import MlflowClient
c = MlflowClient("sqlite:////tmp/sl/mlflow.db")
for e in c.search_experiments():
    for r in c.search_runs([e.experiment_id]):
        t = r.data.tags
        print(e.name, "|", r.info.run_name, r.info.status, t.get("device"), "job", t.get("job"), "batch_job", t.get("batch_job"),
              "latency_ms", r.data.metrics.get("latency_ms"))
PY
step "issue 13: python3 benchmarks/probe_nhwc.py (grid BM=64,128 BN=64,128 BK=32 W=4,8 S=3,4)"
timeout ${NHWC_S:-330} python3 benchmarks/probe_nhwc.py --out "$OUT/nhwc.jsonl" ${NHWC_PROBLEMS:+--problems $NHWC_PROBLEMS} \
  2>&1 | grep -v "^$"
if [ -n "${TRAIN:-}" ]; then
  for b in 32 128; do
    step "issue 11: python3 benchmarks/probe_train_gap.py --batch $b --rounds 3 --steps 30"
    timeout 150 python3 benchmarks/probe_train_gap.py --batch $b --rounds 3 --steps 30 2>&1 | tail -14
  done
fi
