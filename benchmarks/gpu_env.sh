# Sourced by the benchmarks/gpu_*.sh scripts on the GPU machine: installs the carried wheels (.whl, from
# bash ../shared/device/fetch-wheels.sh), puts src/ on the path, defines `step` (a heading per command) and
# prints the device and versions, so that every log says what it ran on.
OUT=${OUT:-out}; mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
step() { echo; echo "== $*"; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"
