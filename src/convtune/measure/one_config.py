"""One configuration, measured: inputs, float64 reference, poisoned launch, check, timing, cuDNN baseline.

Knows torch, the kernel library and bench; knows nothing of Hydra or MLflow. Returns plain numbers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Optional

import torch
import torch.nn.functional as F

from convtune.measure import bench
from convtune.measure.bench import TimingSettings
from convtune.measure.correctness import judge
from convtune.kernels import KernelVariant, Meta
from convtune.kernels.conv_args import TORCH_DTYPES
from convtune.kernels.epilogue import NO_EPILOGUE, Epilogue, as_kwargs, pack_vectors, torch_chain
from convtune.kernels.precision import torch_uses_tf32
from convtune.measure.metrics import GpuSpec, floor_ms, performance
from convtune.measure.occupancy import SmLimits, occupancy
from convtune.problem import ConvProblem
from convtune.record import Metric, Status, Tag


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
    torch.nn.Conv2d initialises them (uniform ±1/sqrt(fan_in)), drawn in float32 and cast to the problem's dtype (the
    same values, rounded, in every dtype)."""
    g = torch.Generator(device=device).manual_seed(seed)
    draw = torch.rand if p.init == "rand" else torch.randn
    dtype = TORCH_DTYPES[p.dtype]
    x = draw(p.input_shape, generator=g, device=device, dtype=torch.float32).to(dtype)
    x = x.contiguous(memory_format=memory_format(p))
    bound = 1.0 / math.sqrt(p.in_channels * p.kernel_h * p.kernel_w)
    w = ((torch.rand(p.weight_shape, generator=g, device=device) * 2 - 1) * bound).to(dtype)
    b = ((torch.rand((p.out_channels,), generator=g, device=device) * 2 - 1) * bound).to(dtype) if p.bias else None
    return x, w, b


def make_epilogue(p: ConvProblem, seed: int, device: torch.device) -> Epilogue:
    """The tensors of the problem's epilogue (NO_EPILOGUE without one), from a generator of their own (seed + 1), so
    that a fused problem's input, weight and bias are its convolution's alone: a bn's (or bn_train's) scale uniform in
    [0.5, 1.5) and shift in [-0.5, 0.5), a scale's factors uniform in [0.5, 1.5), a bias's shift as the convolution's
    bias is drawn, a residual uniform in [-1, 1) in the output's layout; in the problem's dtype, as torch's chain would
    hold them."""
    if not p.epilogue:
        return NO_EPILOGUE
    g = torch.Generator(device=device).manual_seed(seed + 1)
    dtype = TORCH_DTYPES[p.dtype]

    def uniform(shape: tuple[int, ...], lo: float, hi: float) -> torch.Tensor:
        return (torch.rand(shape, generator=g, device=device) * (hi - lo) + lo).to(dtype)
    bound = 1.0 / math.sqrt(p.in_channels * p.kernel_h * p.kernel_w)
    k = (p.out_channels,)
    params = [(uniform(k, 0.5, 1.5), uniform(k, -0.5, 0.5)) if op in ("bn", "bn_train") else
              (uniform(k, 0.5, 1.5), None) if op == "scale" else
              (None, uniform(k, -bound, bound)) if op == "bias" else (None, None) for op in p.epilogue]
    residual = (uniform(p.output_shape, -1.0, 1.0).contiguous(memory_format=memory_format(p))
                if "add" in p.epilogue else None)
    return Epilogue(p.epilogue, pack_vectors(p.epilogue, params), residual)


def memory_format(p: ConvProblem) -> torch.memory_format:
    """The problem's input layout as torch names it; the output follows it, as torch's convolution's does."""
    return torch.channels_last if p.layout == "channels_last" else torch.contiguous_format


def poisoned_output(p: ConvProblem, device: torch.device) -> torch.Tensor:
    """A NaN-filled output in the problem's layout (as torch's convolution lays it out): a kernel must write
    every element, and writes the layout a user's call would get."""
    out = torch.empty(p.output_shape, device=device, dtype=TORCH_DTYPES[p.dtype], memory_format=memory_format(p))
    return out.fill_(float("nan"))


_cudnn_cache: dict[tuple[Any, ...], dict[str, float]] = {}


def cudnn_baseline(p: ConvProblem, x: torch.Tensor, w: torch.Tensor, b: Optional[torch.Tensor], precision: str,
                   s: TimingSettings, epilogue: Epilogue = NO_EPILOGUE) -> dict[str, float]:
    """torch.nn.functional.conv2d (cuDNN, benchmark mode) timed exactly as the kernel is, in NCHW and in
    channels_last; `cudnn_ms` is the faster layout. A fused problem's baseline is the convolution followed by its
    epilogue op after op, as eager torch runs them (kernels/epilogue.torch_chain). Cached per process for a problem,
    precision and setting."""
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
            ep = epilogue if epilogue.residual is None else Epilogue(
                epilogue.chain, epilogue.vectors, epilogue.residual.contiguous(memory_format=fmt))
            t = bench.time_gpu(lambda: torch_chain(F.conv2d(xl, wl, b, p.stride, p.padding, p.dilation), ep), s,
                               x.device)
            out[f"cudnn_{layout}_ms"] = t.median_ms  # Metric.CUDNN_NCHW_MS, CUDNN_CHANNELS_LAST_MS
        out[Metric.CUDNN_MS] = min(out[Metric.CUDNN_NCHW_MS], out[Metric.CUDNN_CHANNELS_LAST_MS])
    finally:
        torch.backends.cudnn.benchmark, torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = saved
    _cudnn_cache[key] = out
    return out


def measure(p: ConvProblem, variant: KernelVariant, meta: Meta, precision: str, tol: float, seed: int,
            s: TimingSettings, device: str, spec: Optional[GpuSpec], with_cudnn: bool,
            check: str = "kernelbench") -> Measurement:
    """Check the kernel (convtune.measure.correctness.judge: float64, and torch as KernelBench compares), then
    (only if correct by `check`) time it.

    Exceptions from the kernel (bad meta-parameters, Triton's OutOfResources or CompilationError, launch
    errors) propagate to the caller, which records them as a failed run."""
    dev = torch.device("cuda" if device == "cuda" else "cpu")
    x, w, b = make_inputs(p, seed, dev)
    ep = make_epilogue(p, seed, dev)
    out = poisoned_output(p, dev)

    def call() -> Any:
        return variant.launch(x, w, b, p.stride, p.padding, p.dilation, meta, precision, out=out, **as_kwargs(ep))

    on_gpu = dev.type == "cuda"
    # The first launch compiles (or loads from Triton's disk cache) and writes into the NaN-poisoned output,
    # which is what gets checked.
    compile_s, launched = bench.first_call(call, dev)
    verdict = judge(out, p, x, w, b, precision, tol, check, ep)
    metrics: dict[str, float] = {**verdict.metrics, Metric.COMPILE_S: compile_s}
    tags: dict[str, str] = dict(verdict.tags)
    tags[Tag.LLVM_OPT] = launched.llvm_opt  # O0: Triton's O3 binary failed its one-time check (kernels/llvm_opt.py)
    if launched.n_regs is not None:
        metrics.update({Metric.REGISTERS: launched.n_regs, Metric.SPILLS: launched.n_spills,
                        Metric.SHARED_MEM_BYTES: launched.shared_bytes})
        occ = occupancy(launched.n_regs, launched.shared_bytes or 0, meta.num_warps, sm_limits(dev))
        metrics.update({Metric.OCCUPANCY_PCT: 100 * occ.fraction, Metric.BLOCKS_PER_SM: occ.blocks_per_sm,
                        Metric.WARPS_PER_SM: occ.warps_per_sm})
        tags[Tag.OCCUPANCY_LIMITER] = occ.limiter
    if not verdict.ok:
        return Measurement(Status.INCORRECT, verdict.message, metrics, tags)

    timing = bench.time_gpu(call, s, dev) if on_gpu else bench.time_host(call, s)
    metrics.update(timing.metrics("latency"))  # Metric.LATENCY_MS, _P20_MS, _P80_MS, _CV
    metrics.update(performance(p, timing.median_ms, spec, precision))
    if spec is not None:
        metrics[Metric.FLOOR_MS], tags[Tag.FLOOR_SOURCE] = floor_ms(p, spec, precision)
        metrics.update({Metric.PEAK_TFLOPS: spec.peak_tflops(precision, p.dtype), Metric.PEAK_GBPS: spec.dram_gbps})
        if p.dtype != "float32":
            if spec.measured_half_tflops and spec.measured_copy_gbps:
                metrics.update({Metric.MEASURED_PEAK_TFLOPS: spec.measured_half_tflops,
                                Metric.MEASURED_PEAK_GBPS: spec.measured_copy_gbps})
        elif spec.measured_tf32_tflops and spec.measured_copy_gbps and precision != "ieee":
            metrics.update({Metric.MEASURED_PEAK_TFLOPS: spec.measured_tf32_tflops / (3 if precision == "tf32x3" else 1),
                            Metric.MEASURED_PEAK_GBPS: spec.measured_copy_gbps})
        metrics[Metric.PCT_OF_FLOOR] = 100.0 * metrics[Metric.FLOOR_MS] / timing.median_ms
    if on_gpu and with_cudnn:
        base = cudnn_baseline(p, x, w, b, precision, s, ep)
        metrics.update(base)
        # a channels_last input against cuDNN channels_last; an NCHW one against cuDNN's faster layout (any
        # conversion our kernel needs is inside its timed call)
        versus = base[Metric.CUDNN_CHANNELS_LAST_MS] if p.layout == "channels_last" else base[Metric.CUDNN_MS]
        metrics[Metric.SPEEDUP_VS_CUDNN] = versus / timing.median_ms
    return Measurement(Status.OK, verdict.message, metrics, tags)
