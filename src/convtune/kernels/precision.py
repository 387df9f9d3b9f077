"""What each `precision` means for a kernel, and TF32 rounding as cuDNN does it.

cuDNN (torch's default for fp32 convolutions) rounds fp32 operands to TF32 *to nearest, ties away from zero*
(PTX cvt.rna.tf32.f32): rounding x and w that way on the host and computing exactly reproduced cuDNN's TF32
output within 2.3e-6 on L1 #50 (H200, FACTS.md). Triton's TF32 `tl.dot` *truncates* the low 13 mantissa bits,
which gave |diff| 1.3e-3 against cuDNN and failed KernelBench's allclose(atol=rtol=1e-4). So:

- `tf32`: operands rounded to nearest before the TF32 dot (matches torch's default convolution);
- `tf32_trunc`: Triton's plain TF32 dot (truncation): faster by the rounding's cost, does not match torch;
- `tf32x3`: three TF32 products per multiply (fp32-class accuracy); `ieee`: true fp32 FMA.

The rounding is integer arithmetic on the float's bits (add half a TF32 ulp, clear 13 bits), identical to
cvt.rna for finite values, and it runs in the Triton interpreter too, so CPU tests exercise it.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

PRECISIONS = ("tf32", "tf32_trunc", "tf32x3", "ieee")
TF32_HALF_ULP = 0x1000  # bit 12: half of the lowest mantissa bit TF32 keeps (bit 13)
TF32_MASK = -8192  # 0xFFFFE000 as int32: sign, exponent and the 10 mantissa bits TF32 keeps


def dot_precision(precision: str) -> str:
    """tl.dot's input_precision for a convtune precision."""
    return "tf32" if precision in ("tf32", "tf32_trunc") else precision


def rounds_operands(precision: str) -> bool:
    """Whether operands are rounded to nearest TF32 before the dot (cuDNN's rounding)."""
    return precision == "tf32"


def torch_uses_tf32(precision: str) -> bool:
    """Whether torch's own convolution, at the setting that matches this precision, runs in TF32."""
    return precision in ("tf32", "tf32_trunc")


def promises_torch_match(precision: str) -> bool:
    """Whether this precision is meant to agree with torch by KernelBench's allclose (all but tf32_trunc).
    For tf32 that holds where cuDNN runs a TF32 algorithm; convtune.verify tells those cases apart."""
    return precision != "tf32_trunc"


def round_to_tf32(t: torch.Tensor) -> torch.Tensor:
    """fp32 → fp32 holding a TF32 value, rounded to nearest with ties away from zero (cvt.rna), on the host side."""
    bits = t.contiguous().view(torch.int32)
    return ((bits + TF32_HALF_ULP) & TF32_MASK).view(torch.float32)


@triton.jit
def round_tf32(x):
    """In-kernel twin of round_to_tf32: add half a TF32 ulp to the bits, clear the 13 low mantissa bits."""
    bits = x.to(tl.int32, bitcast=True)
    return ((bits + 0x1000) & -8192).to(tl.float32, bitcast=True)
