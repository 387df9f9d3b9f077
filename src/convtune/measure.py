"""One configuration, measured: inputs, float64 reference, poisoned launch, check, timing, cuDNN baseline.

Knows torch, the kernel library and bench; knows nothing of Hydra or MLflow. Returns plain numbers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Optional

import torch
import torch.nn.functional as F

from convtune import bench
from convtune.bench import TimingSettings
from convtune.correctness import judge
from convtune.kernels import KernelVariant, Meta
from convtune.kernels.precision import torch_uses_tf32
from convtune.metrics import GpuSpec, floor_ms, performance
from convtune.occupancy import SmLimits, occupancy
from convtune.problem import ConvProblem


@dataclass
class Measurement:
    status: str  # ok | incorrect
    message: str
    metrics: dict[str, float] = field(default_factory=dict)
    tags: dict[str, str] = field(default_factory=dict)


def sm_limits(device: torch.device) -> SmLimits:
    """This GPU's per-SM limits, read off the device."""
    props = torch.cuda.get_device_properties(device)
    return SmLimits(regs_per_sm=props.regs_per_multiprocessor,
                    max_warps_per_sm=props.max_threads_per_multi_processor // 32,
                    smem_per_sm=props.shared_memory_per_multiprocessor)


def make_inputs(p: ConvProblem, seed: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor, Optional[torch.Tensor]]:
    """Seeded inputs, never zeros: x as the problem says (rand as KernelBench), weight and bias drawn as
    torch.nn.Conv2d initialises them (uniform ±1/sqrt(fan_in))."""
    g = torch.Generator(device=device).manual_seed(seed)
    draw = torch.rand if p.init == "rand" else torch.randn
    x = draw(p.input_shape, generator=g, device=device, dtype=torch.float32)
    bound = 1.0 / math.sqrt(p.in_channels * p.kernel_h * p.kernel_w)
    w = (torch.rand(p.weight_shape, generator=g, device=device) * 2 - 1) * bound
    b = (torch.rand((p.out_channels,), generator=g, device=device) * 2 - 1) * bound if p.bias else None
    return x, w, b


_cudnn_cache: dict[tuple[Any, ...], dict[str, float]] = {}


def cudnn_baseline(p: ConvProblem, x: torch.Tensor, w: torch.Tensor, b: Optional[torch.Tensor], precision: str,
                   s: TimingSettings) -> dict[str, float]:
    """torch.nn.functional.conv2d (cuDNN, benchmark mode) timed exactly as the kernel is, in NCHW and in
    channels_last; `cudnn_ms` is the faster layout. Cached per process for a problem, precision and setting."""
    key = (torch.cuda.get_device_name(x.device), p.key(), precision, s)
    if key in _cudnn_cache:
        return _cudnn_cache[key]
    saved = (torch.backends.cudnn.benchmark, torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32)
    torch.backends.cudnn.benchmark = True
    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = torch_uses_tf32(precision)
    try:
        out = {}
        for layout, fmt in (("nchw", torch.contiguous_format), ("channels_last", torch.channels_last)):
            xl, wl = x.contiguous(memory_format=fmt), w.contiguous(memory_format=fmt)
            t = bench.time_gpu(lambda: F.conv2d(xl, wl, b, p.stride, p.padding, p.dilation), s, x.device)
            out[f"cudnn_{layout}_ms"] = t.median_ms
        out["cudnn_ms"] = min(out["cudnn_nchw_ms"], out["cudnn_channels_last_ms"])
    finally:
        torch.backends.cudnn.benchmark, torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = saved
    _cudnn_cache[key] = out
    return out


def measure(p: ConvProblem, variant: KernelVariant, meta: Meta, precision: str, tol: float, seed: int,
            s: TimingSettings, device: str, spec: Optional[GpuSpec], with_cudnn: bool,
            check: str = "kernelbench") -> Measurement:
    """Check the kernel (convtune.correctness.judge: float64, and torch as KernelBench compares), then
    (only if correct by `check`) time it.

    Exceptions from the kernel (bad meta-parameters, Triton's OutOfResources or CompilationError, launch
    errors) propagate to the caller, which records them as a failed run."""
    dev = torch.device("cuda" if device == "cuda" else "cpu")
    x, w, b = make_inputs(p, seed, dev)
    out = torch.full(p.output_shape, float("nan"), device=dev, dtype=torch.float32)

    def call() -> Any:
        return variant.launch(x, w, b, p.stride, p.padding, p.dilation, meta, precision, out=out)

    on_gpu = dev.type == "cuda"
    # The first launch compiles (or loads from Triton's disk cache) and writes into the NaN-poisoned output,
    # which is what gets checked.
    compile_s, launched = bench.first_call(call, dev)
    verdict = judge(out, p, x, w, b, precision, tol, check)
    metrics: dict[str, float] = {**verdict.metrics, "compile_s": compile_s}
    tags: dict[str, str] = dict(verdict.tags)
    tags["llvm_opt"] = launched.llvm_opt  # O0: Triton's O3 binary failed its one-time check (kernels/llvm_opt.py)
    if launched.n_regs is not None:
        metrics.update(registers=launched.n_regs, spills=launched.n_spills, shared_mem_bytes=launched.shared_bytes)
        occ = occupancy(launched.n_regs, launched.shared_bytes or 0, meta.num_warps, sm_limits(dev))
        metrics.update(occupancy_pct=100 * occ.fraction, blocks_per_sm=occ.blocks_per_sm, warps_per_sm=occ.warps_per_sm)
        tags["occupancy_limiter"] = occ.limiter
    if not verdict.ok:
        return Measurement("incorrect", verdict.message, metrics, tags)

    timing = bench.time_gpu(call, s, dev) if on_gpu else bench.time_host(call, s)
    metrics.update(timing.metrics("latency"))
    metrics.update(performance(p, timing.median_ms, spec, precision))
    if spec is not None:
        metrics["floor_ms"], tags["floor_source"] = floor_ms(p, spec, precision)
        metrics.update(peak_tflops=spec.peak_tflops(precision), peak_gbps=spec.dram_gbps)
        if spec.measured_tf32_tflops and spec.measured_copy_gbps and precision != "ieee":
            metrics.update(measured_peak_tflops=spec.measured_tf32_tflops / (3 if precision == "tf32x3" else 1),
                           measured_peak_gbps=spec.measured_copy_gbps)
        metrics["pct_of_floor"] = 100.0 * metrics["floor_ms"] / timing.median_ms
    if on_gpu and with_cudnn:
        base = cudnn_baseline(p, x, w, b, precision, s)
        metrics.update(base)
        metrics["speedup_vs_cudnn"] = base["cudnn_ms"] / timing.median_ms
    return Measurement("ok", verdict.message, metrics, tags)
