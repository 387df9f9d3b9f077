#!/usr/bin/env bash
# Issue 11, "never slower than torch", on a GPU: the gpu tests of the torch pin, promote with torch contending on
# the 9 suite problems and on every distinct ResNet-50 convolution at batch 32 (benchmarks/pin_model.py), into
# the library's pins file (src/convtune/pins.yaml; copied to $OUT); then `drop_in` measures the converted model.
# PROBLEMS="..." narrows the suite problems.
# Needs .whl (bash ../shared/device/fetch-wheels.sh). Logs under $OUT (or ./out).
set -uo pipefail
OUT=${OUT:-out}; mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
S=sqlite:////tmp/pins/mlflow.db; mkdir -p /tmp/pins
step() { echo; echo "== $*"; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
step "python3 -m pytest tests/test_gpu.py -k torch"
timeout 120 python3 -m pytest -q -p no:cacheprovider tests/test_gpu.py -k torch 2>&1 | tail -4
for p in ${PROBLEMS:-kernelbench_l1_50 alexnet_conv2 alexnet_conv3 alexnet_conv4 alexnet_conv5 vgg16_conv3_2 resnet50_layer1_1x1 resnet50_layer2_3x3 resnet50_stem}; do
  step "python3 promote.py problem=$p device=cuda"
  timeout 120 python3 promote.py problem=$p device=cuda tracking.uri=$S hydra.run.dir=/tmp/pins/p_$p 2>&1 | grep -E "^\||^decision|^refused|^error|library now runs"
done
step "python3 benchmarks/pin_model.py --model resnet50 --batch 32"
timeout 330 python3 benchmarks/pin_model.py --model resnet50 --batch 32 --store $S 2>&1
cp src/convtune/pins.yaml "$OUT/pins.yaml"
step "python3 benchmarks/drop_in.py --shapes 10 --batch 32 --steps 100"
timeout 200 python3 benchmarks/drop_in.py --shapes 10 --batch 32 --steps 100 2>&1
