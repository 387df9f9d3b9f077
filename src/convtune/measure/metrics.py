"""Derived performance metrics: pure arithmetic on a problem, a time and a GPU's peak rates."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from convtune.problem import HALF_DTYPES, ConvProblem
from convtune.record import Metric


@dataclass(frozen=True)
class GpuSpec:
    """Datasheet peaks (dense, no sparsity). tf32 = tensor-core TF32; fp32 = plain CUDA-core FP32; half = tensor-core
    bfloat16/float16 with float32 accumulation."""

    name: str
    tf32_tflops: float
    fp32_tflops: float
    dram_gbps: float
    half_tflops: float
    # Ceilings measured on such a GPU (a large device copy counting read + write; a large TF32 matmul),
    # used for the floor when known; the datasheet rates above stay the basis of pct_peak_*.
    measured_tf32_tflops: Optional[float] = None
    measured_copy_gbps: Optional[float] = None
    measured_half_tflops: Optional[float] = None

    def peak_tflops(self, precision: str, dtype: str = "float32") -> float:
        if dtype in HALF_DTYPES:  # precision is float32's math mode: a 16-bit problem runs the 16-bit MMA
            return self.half_tflops
        # ieee makes tl.dot use FMA on CUDA cores: the plain FP32 rate. tf32x3 spends three TF32 products
        # per multiply, so a third of the TF32 rate is its ceiling in useful FLOPs.
        return {"tf32": self.tf32_tflops, "tf32_trunc": self.tf32_tflops, "tf32x3": self.tf32_tflops / 3}.get(precision, self.fp32_tflops)


# Matched in order against torch.cuda.get_device_name(); the first pattern contained in the name wins.
# Vendor datasheets: RTX 4090 (Ada, the GPU of the brief's NCU readings), H100 SXM/PCIe, H200 SXM, A100.
GPU_SPECS: tuple[tuple[str, GpuSpec], ...] = (
    # H200 measured values (docs/PERFORMANCE.md; torch 2.11, triton 3.6, do_bench median, L2 flushed).
    ("H200", GpuSpec("NVIDIA H200", 494.7, 66.9, 4800.0, 989.4, measured_tf32_tflops=368.0, measured_copy_gbps=4270.0,
                     measured_half_tflops=702.0)),
    ("H100 PCIe", GpuSpec("NVIDIA H100 PCIe", 378.0, 51.2, 2000.0, 756.0)),
    ("H100", GpuSpec("NVIDIA H100 SXM", 494.7, 66.9, 3350.0, 989.4)),
    ("A100-SXM4-80GB", GpuSpec("NVIDIA A100 80GB", 156.0, 19.5, 2039.0, 312.0)),
    ("A100", GpuSpec("NVIDIA A100 40GB", 156.0, 19.5, 1555.0, 312.0)),
    ("RTX 4090", GpuSpec("NVIDIA GeForce RTX 4090", 82.6, 82.6, 1008.0, 165.2)),
)


def gpu_spec(device_name: str) -> Optional[GpuSpec]:
    for pattern, spec in GPU_SPECS:
        if pattern in device_name:
            return spec
    return None


def performance(problem: ConvProblem, latency_ms: float, spec: Optional[GpuSpec], precision: str) -> dict[str, float]:
    """tflops, gbps, arithmetic intensity and, for a known GPU, % of its peaks."""
    seconds = latency_ms * 1e-3
    tflops = problem.flops / seconds / 1e12
    gbps = problem.min_bytes / seconds / 1e9
    out = {Metric.TFLOPS: tflops, Metric.GBPS: gbps, Metric.ARITHMETIC_INTENSITY: problem.flops / problem.min_bytes}
    if spec is not None:
        out[Metric.PCT_PEAK_TFLOPS] = 100.0 * tflops / spec.peak_tflops(precision, problem.dtype)
        out[Metric.PCT_PEAK_GBPS] = 100.0 * gbps / spec.dram_gbps
    return out


def floor_ms(problem: ConvProblem, spec: GpuSpec, precision: str) -> tuple[float, str]:
    """The roofline floor, the larger of compute time at peak rate and fewest bytes at peak bandwidth, and
    whether it used measured ceilings ("measured") or the datasheet ("datasheet")."""
    peak, bw, source = spec.peak_tflops(precision, problem.dtype), spec.dram_gbps, "datasheet"
    if problem.dtype in HALF_DTYPES:
        if spec.measured_copy_gbps and spec.measured_half_tflops:
            peak, bw, source = spec.measured_half_tflops, spec.measured_copy_gbps, "measured"
    elif spec.measured_copy_gbps and (precision == "ieee" or spec.measured_tf32_tflops):
        bw, source = spec.measured_copy_gbps, "measured"
        if precision != "ieee":
            peak = spec.measured_tf32_tflops / (3 if precision == "tf32x3" else 1)
    return 1e3 * max(problem.flops / (peak * 1e12), problem.min_bytes / (bw * 1e9)), source
