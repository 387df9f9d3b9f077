"""Check an exported KernelBench file the way KernelBench's judge does (kernelbench.eval.eval_kernel_against_ref):
the reference `Model` and the file's `ModelNew` built right after the same seed (so their parameters agree
only if ModelNew creates them in nn.Conv2d's order), several trials on fresh `torch.rand` inputs, each
compared with `torch.allclose(reference, new, atol=1e-4, rtol=1e-4)` with torch at its defaults (cuDNN,
TF32 on for convolutions), then both timed with the L2 cache flushed before every call. GPU only. A bfloat16 or
float16 problem is checked as KernelBench's precision=bf16/fp16 checks it: inputs and both models cast to the dtype,
allclose at atol = rtol = 1e-2.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass, field
from pathlib import Path

import torch

from convtune.measure import bench
from convtune.kernels.conv_args import TORCH_DTYPES
from convtune.kernels.epilogue import TORCH_ACTIVATIONS
from convtune.kernels.export_format import level2_chain
from convtune.measure.correctness import KB_ATOL, KB_HALF_TOLERANCE
from convtune.problem import ConvProblem


@dataclass
class KernelBenchVerdict:
    path: Path
    trials: int
    passed: int
    tolerance: float = KB_ATOL
    max_abs_diff: list[float] = field(default_factory=list)
    ref_ms: float = float("nan")
    new_ms: float = float("nan")
    error: str = ""

    @property
    def correct(self) -> bool:
        return not self.error and self.passed == self.trials

    def report(self) -> str:
        if self.error:
            return f"KernelBench-style check of {self.path}: FAILED to run: {self.error}"
        diffs = ", ".join(f"{d:.2g}" for d in self.max_abs_diff)
        head = (f"KernelBench-style check of {self.path}: {self.passed}/{self.trials} trials correct "
                f"(allclose atol=rtol={self.tolerance:g}; max |diff| per trial: {diffs})")
        if not self.correct:
            return head + " → INCORRECT"
        return head + f"\ntiming (L2 flushed, median): Model {self.ref_ms:.4f} ms, ModelNew {self.new_ms:.4f} ms, " \
                      f"speedup {self.ref_ms / self.new_ms:.2f}x"


# the factor a level-2 `scale` multiplies by in this check: the Model's scaling_factor, its last init input (2.0 in
# KernelBench level 2 #73)
SCALING_FACTOR = 2.0


class _Reference(torch.nn.Module):
    """KernelBench's level-1 conv Model: one nn.Conv2d called conv1, run by torch at its defaults; for a problem with
    an epilogue, its level-2 Model (kernels/export_format.level2_chain): the nn.Conv2d called conv, then the chain's
    bias parameter (C_out, 1, 1) drawn with torch.randn, its nn.BatchNorm2d `bn` and its `scaling_factor`, and a
    forward that runs each op after the convolution (in training mode, as KernelBench runs it)."""

    def __init__(self, p: ConvProblem) -> None:
        super().__init__()
        conv = torch.nn.Conv2d(p.in_channels, p.out_channels, (p.kernel_h, p.kernel_w), stride=p.stride,
                               padding=p.padding, dilation=p.dilation, bias=p.bias)
        self.chain = level2_chain(p)
        if self.chain:
            self.conv = conv
            if "bias" in self.chain:
                self.bias = torch.nn.Parameter(torch.randn((p.out_channels, 1, 1)))
            if "bn_train" in self.chain:
                self.bn = torch.nn.BatchNorm2d(p.out_channels)
            self.scaling_factor = SCALING_FACTOR
        else:
            self.conv1 = conv

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.chain:
            return self.conv1(x)
        x = self.conv(x)
        for op in self.chain:
            x = (x + self.bias if op == "bias" else self.bn(x) if op == "bn_train" else
                 x * self.scaling_factor if op == "scale" else TORCH_ACTIVATIONS[op](x))
        return x


def load_model_new(path: Path) -> type:
    spec = importlib.util.spec_from_file_location(f"kb_export_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module.ModelNew


def check_file(path: Path, p: ConvProblem, trials: int = 5, seed: int = 42) -> KernelBenchVerdict:
    dtype = TORCH_DTYPES[p.dtype]
    verdict = KernelBenchVerdict(path, trials, 0, KB_ATOL if p.dtype == "float32" else KB_HALF_TOLERANCE)
    dev = torch.device("cuda")
    try:
        model_new_cls = load_model_new(path)
        torch.manual_seed(seed)
        ref = _Reference(p).to(device=dev, dtype=dtype)
        torch.manual_seed(seed)
        init = (p.in_channels, p.out_channels, p.kernel_h, SCALING_FACTOR) if p.epilogue else ()
        new = model_new_cls(*init).to(device=dev, dtype=dtype)  # the file bakes in the problem's sizes
        with torch.no_grad():
            for t in range(trials):
                torch.manual_seed(seed + 1 + t)
                x = torch.rand(p.input_shape).to(device=dev, dtype=dtype)  # KernelBench's get_inputs: torch.rand
                want, got = ref(x), new(x)
                torch.cuda.synchronize()
                verdict.max_abs_diff.append(float((want.float() - got.float()).abs().max()))
                verdict.passed += bool(torch.allclose(want, got, atol=verdict.tolerance, rtol=verdict.tolerance))
            if verdict.correct:
                settings = bench.TimingSettings(rounds=5, reps=20, warmup=3)
                verdict.ref_ms = bench.time_gpu(lambda: ref(x), settings, dev).median_ms
                verdict.new_ms = bench.time_gpu(lambda: new(x), settings, dev).median_ms
    except Exception as e:  # noqa: BLE001 - a file that does not run is a verdict, with its reason
        verdict.error = f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}"
    return verdict
