"""Run KernelBench's own judge (`kernelbench.eval.eval_kernel_against_ref`) on an exported file.

KernelBench's package __init__ and utils import LLM clients (openai, litellm, dotenv), so this loads only
its modules eval, timing and dataset from a copy of its source (not part of convtune: fetch the repository and
copy those three files into a folder) as a package whose `utils` is a one-function stand-in.

    python benchmarks/kernelbench_judge.py --kb <folder> --ref <level1/50_...py> <export.py>

It prints KernelBench's result as JSON, then one line, the verdict (`verdict`), last: KernelBench's own "[Profiling]"
lines come before it, and a log's tail then says what the judge found (a tail of the JSON alone had read as the
export's own check, which prints similar numbers). Exit 0 when KernelBench finds the file correct.
"""

import argparse
import importlib
import json
import sys
import tempfile
import types
from pathlib import Path


def load_eval(kb_dir: Path) -> types.ModuleType:
    pkg = types.ModuleType("kernelbench")
    pkg.__path__ = [str(kb_dir)]  # kernelbench.eval's `from . import timing, dataset` resolves in that folder
    sys.modules["kernelbench"] = pkg
    utils = types.ModuleType("kernelbench.utils")

    def get_gpu_vendor(device=None):  # the only name kernelbench.eval takes from utils
        import torch

        return "nvidia" if "NVIDIA" in torch.cuda.get_device_name(device).upper() else "unknown"

    utils.get_gpu_vendor = get_gpu_vendor
    sys.modules["kernelbench.utils"] = utils
    return importlib.import_module("kernelbench.eval")


def verdict(data: dict) -> str:
    """One line from KernelBench's result (eval_kernel_against_ref's KernelExecResult as a dict): correct or not, its
    trials, ModelNew's and the reference's runtimes (KernelBench's ms) and their ratio, the GPU."""
    meta = data.get("metadata") or {}
    if not data.get("compiled"):
        return f"KernelBench's judge: did not compile ({meta.get('compilation_error', 'no reason given')})"
    words = "correct" if data.get("correctness") else "NOT correct"
    line = f"KernelBench's judge: {words} {meta.get('correctness_trials', '')}".rstrip()
    runtime, ref = data.get("runtime", -1.0), data.get("ref_runtime", -1.0)
    if runtime and runtime > 0:
        line += f", ModelNew {runtime} ms"
        if ref and ref > 0:
            line += f" against the reference's {ref} ms ({ref / runtime:.2f}x)"
    return line + (f", {meta['hardware']}" if meta.get("hardware") else "")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--kb", type=Path, required=True, help="folder holding KernelBench's eval.py, timing.py, dataset.py")
    ap.add_argument("--ref", type=Path, required=True, help="the problem's reference file (Model, get_inputs)")
    ap.add_argument("--trials", type=int, default=5)
    ap.add_argument("--perf-trials", type=int, default=100)
    ap.add_argument("--precision", choices=["fp32", "bf16", "fp16"], default="fp32",
                    help="KernelBench's precision: inputs and both models cast to it, its tolerance for it")
    ap.add_argument("custom", type=Path)
    a = ap.parse_args()
    ev = load_eval(a.kb)
    precision = ev.get_torch_dtype_from_string(a.precision)
    with tempfile.TemporaryDirectory() as build:
        result = ev.eval_kernel_against_ref(a.ref.read_text(), a.custom.read_text(), num_correct_trials=a.trials,
                                            num_perf_trials=a.perf_trials, measure_performance=True, backend="triton",
                                            build_dir=build, verbose=False, precision=precision)
    data = result.model_dump() if hasattr(result, "model_dump") else dict(result)
    print(json.dumps(data, indent=1, default=str))
    print(verdict(data))
    return 0 if data.get("correctness") else 1


if __name__ == "__main__":
    sys.exit(main())
