#!/usr/bin/env bash
# The GPU evidence quoted in README and the issues' closing notes. Run on the GPU machine from the project
# root with the wheels installed:  bash benchmarks/evidence.sh core|suite|final   (files go to $OUT)
set -uo pipefail
OUT=${OUT:-/tmp/evidence-out}; mkdir -p "$OUT"
S=/tmp/evidence; rm -rf $S; mkdir -p $S
export CONVTUNE_CACHE=$S PYTHONUNBUFFERED=1
C="tracking.uri=sqlite:///$S/mlflow.db pins_file=$S/pins.yaml"
step() { echo; echo "=== $*"; }
quiet() { grep -v -E '^\[20[0-9-]+ |^20[0-9/]+ .* INFO mlflow|SADeprecationWarning|configure_mappers'; }

step "device"; nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"
step "python -m convtune.calibrate"; python3 -m convtune.calibrate

if [ "$1" = final ]; then
  step "pytest tests/test_gpu.py"; python3 -m pytest -q -p no:cacheprovider tests/test_gpu.py 2>&1 | tail -3
  step "precisions: python run.py -m problem=kernelbench_l1_50 precision=tf32,tf32x3,ieee"
  python3 run.py -m problem=kernelbench_l1_50 precision=tf32,tf32x3,ieee $C 2>&1 | quiet
  step "tf32x3 sweep: python run.py -m precision=tf32x3 BLOCK_M=128 BLOCK_N=128 BLOCK_K=16,32 num_warps=4,8 num_stages=3,4"
  python3 run.py -m precision=tf32x3 BLOCK_M=128 BLOCK_N=128 BLOCK_K=16,32 num_warps=4,8 num_stages=3,4 $C 2>&1 | quiet
  step "promote tf32x3: python promote.py precision=tf32x3"; python3 promote.py precision=tf32x3 $C 2>&1 | quiet
  step "vs cuDNN: python run.py +experiment=vs_cudnn"; python3 run.py +experiment=vs_cudnn $C 2>&1 | quiet
  step "library overhead: python benchmarks/overhead.py"; python3 benchmarks/overhead.py
  cp $S/pins.yaml "$OUT"/ 2>/dev/null
elif [ "$1" = core ]; then
  step "pytest tests/test_gpu.py"; python3 -m pytest -q -p no:cacheprovider tests/test_gpu.py 2>&1 | tail -3
  step "sweep: python run.py -m problem=kernelbench_l1_50 BLOCK_M=128,256 BLOCK_N=128 BLOCK_K=16,32 num_warps=4,8 num_stages=3,4"
  python3 run.py -m problem=kernelbench_l1_50 BLOCK_M=128,256 BLOCK_N=128 BLOCK_K=16,32 num_warps=4,8 num_stages=3,4 $C 2>&1 | quiet
  step "promote #1: python promote.py problem=kernelbench_l1_50"; python3 promote.py problem=kernelbench_l1_50 $C 2>&1 | quiet
  step "micro-tune + promote #2: python run.py +experiment=microtune problem=kernelbench_l1_50"
  python3 run.py +experiment=microtune problem=kernelbench_l1_50 $C 2>&1 | quiet
  step "export: python promote.py export=kernelbench"; python3 promote.py export=kernelbench export_path=$S/model_new.py $C 2>&1 | quiet
  python3 - <<PY
import importlib.util, torch
spec = importlib.util.spec_from_file_location("m", "$S/model_new.py"); m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)
model = m.ModelNew().cuda(); ref = torch.nn.Conv2d(3, 96, 11, stride=4, padding=2).cuda(); model.conv1.load_state_dict(ref.state_dict())
x = torch.rand(256, 3, 224, 224, device="cuda")
with torch.no_grad():
    y, r = model(x), torch.nn.functional.conv2d(x.double(), ref.weight.double(), ref.bias.double(), 4, 2)
print("exported ModelNew vs float64 conv: rel err", ((y.double() - r).norm() / r.norm()).item())
PY
  step "library overhead: python benchmarks/overhead.py"; python3 benchmarks/overhead.py
  cp $S/model_new.py "$OUT"/; cp $S/pins.yaml "$OUT"/ 2>/dev/null
else
  step "seed kernel: python run.py +experiment=seed_configs"; python3 run.py +experiment=seed_configs $C 2>&1 | quiet
  step "promote the seed kernel: python promote.py kernel=seed"; python3 promote.py kernel=seed problem=kernelbench_l1_50 $C 2>&1 | quiet
  step "micro-tune the seed kernel: python run.py +experiment=microtune kernel=seed"
  python3 run.py +experiment=microtune kernel=seed problem=kernelbench_l1_50 $C 2>&1 | quiet
  step "library overhead: python benchmarks/overhead.py"; python3 benchmarks/overhead.py
  step "vs cuDNN: python run.py +experiment=vs_cudnn"; python3 run.py +experiment=vs_cudnn $C 2>&1 | quiet
  step "fp32 accuracy: python run.py -m problem=kernelbench_l1_50 precision=tf32x3,ieee"
  python3 run.py -m problem=kernelbench_l1_50 precision=tf32x3,ieee $C 2>&1 | quiet
  step "NCU: python run.py -m problem=kernelbench_l1_50 profile=ncu kernel=seed BLOCK_M=32,64 BLOCK_N=64 BLOCK_K=32 num_warps=4 num_stages=2"
  python3 run.py -m problem=kernelbench_l1_50 profile=ncu kernel=seed BLOCK_M=32,64 BLOCK_N=64 BLOCK_K=32 num_warps=4 num_stages=2 $C 2>&1 | quiet
  step "NCU: python run.py -m problem=kernelbench_l1_50 profile=ncu BLOCK_M=128,256 BLOCK_N=128 BLOCK_K=16 num_warps=8 num_stages=4"
  python3 run.py -m problem=kernelbench_l1_50 profile=ncu BLOCK_M=128,256 BLOCK_N=128 BLOCK_K=16 num_warps=8 num_stages=4 $C 2>&1 | quiet
  step "a raw NCU capture for the parser's test"
  NCU=$(python3 -c "from convtune.measure.ncu import find_ncu; print(find_ncu())")
  $NCU --csv --print-units base --clock-control none --kernel-name regex:_conv2d_.*_kernel --launch-count 1 \
    --metrics $(python3 -c "from convtune.measure.ncu import COUNTERS; print(','.join(COUNTERS))") python3 -m convtune.profile_one \
    '{"problem": {"name": "tiny", "batch": 2, "in_channels": 3, "height": 19, "width": 17, "out_channels": 20, "kernel_h": 5, "kernel_w": 5, "stride": [2, 1], "padding": [2, 1]}, "kernel": "implicit_gemm", "meta": {"BLOCK_M": 64, "BLOCK_N": 32, "BLOCK_K": 16, "num_warps": 4, "num_stages": 2}, "precision": "tf32"}' \
    > "$OUT"/ncu_capture.csv 2>&1; tail -3 "$OUT"/ncu_capture.csv
  for png in roofline.png latency.png; do  # the newest: the last sweep's (implicit_gemm under NCU)
    cp "$(find $S -name $png -printf '%T@ %p\n' | sort -n | tail -1 | cut -d' ' -f2)" "$OUT/$png"
  done
  cp $S/pins.yaml "$OUT"/ 2>/dev/null
fi
cp $S/mlflow.db "$OUT"/mlflow.db
