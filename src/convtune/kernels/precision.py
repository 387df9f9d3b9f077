"""What each `precision` means for a kernel, and TF32 rounding as cuDNN does it.

cuDNN (torch's default for fp32 convolutions) rounds fp32 operands to nearest TF32, and which way it breaks ties
depends on the algorithm it picks (on the H200, cuDNN 9.19): *away from zero* (PTX cvt.rna) on the strided layers over 3 channels (L1 #50:
the exact sum of operands rounded that way is 1.8e-6 from cuDNN's output, 7.2e-5 with ties to even; the ResNet-50 stem
2.0e-6 against 1.9e-4), *to even* on every stride-1 layer of the suite (resnet50_layer1_1x1 3.1e-6 against 1.9e-4,
the 3×3 and 5×5 layers 1.1e-5 to 2.8e-5 against 8e-5 to 1.3e-4), and either on random strided shapes. A tie is
rare (1 operand in 8192 on random data), but a weight tie moves a whole output channel, by up to 1.9e-4, past
KernelBench's allclose(1e-4). Triton's TF32 `tl.dot` *truncates* the low 13 mantissa bits (1.3e-3 from cuDNN on
L1 #50). So:

- `tf32`: operands rounded to nearest before the TF32 dot, ties broken as cuDNN breaks them for the layers the
  kernel serves (its KernelVariant.tf32_ties: the strided few-channel kernels away, the stride-1 ones to even);
- `tf32_trunc`: Triton's plain TF32 dot (truncation): faster by the rounding's cost, does not match torch;
- `tf32x3`: three TF32 products per multiply (fp32-class accuracy); `ieee`: true fp32 FMA.

The rounding is integer arithmetic on the float's bits (add half a TF32 ulp, less one for ties to even where the
kept bit is 0, clear 13 bits), identical to cvt.rna / cvt.rn for finite values, and it runs in the Triton
interpreter too, so CPU tests exercise it.
"""

from __future__ import annotations

from typing import Callable

import torch
import triton
import triton.language as tl

HALF_DTYPES = ("bfloat16", "float16")  # as convtune.problem names them (the kernels room imports no problem)

PRECISIONS = ("tf32", "tf32_trunc", "tf32x3", "ieee")
TF32_HALF_ULP = 0x1000  # bit 12: half of the lowest mantissa bit TF32 keeps (bit 13)
TF32_MASK = -8192  # 0xFFFFE000 as int32: sign, exponent and the 10 mantissa bits TF32 keeps
TIES = ("away", "even")  # how a kernel's `tf32` breaks rounding ties (its module's TF32_TIES)


def kernel_precision(precision: str, dtype: str) -> str:
    """What a kernel's plan is made for: the precision, or for 16-bit operands `tf32_trunc`: no operand rounding (a
    16-bit value is exact in TF32, and the rounding is integer arithmetic on 32-bit floats) and the plain tensor-core
    dot, which for 16-bit operands is the 16-bit MMA with float32 accumulation."""
    return "tf32_trunc" if dtype in HALF_DTYPES else precision


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
    For tf32 that holds where cuDNN runs a TF32 algorithm; convtune.commands.verify tells those cases apart."""
    return precision != "tf32_trunc"


def round_to_tf32(t: torch.Tensor) -> torch.Tensor:
    """fp32 → fp32 holding a TF32 value, rounded to nearest with ties away from zero (cvt.rna), on the host side."""
    bits = t.contiguous().view(torch.int32)
    return ((bits + TF32_HALF_ULP) & TF32_MASK).view(torch.float32)


def round_to_tf32_even(t: torch.Tensor) -> torch.Tensor:
    """fp32 → fp32 holding a TF32 value, rounded to nearest with ties to even (cvt.rn), on the host side."""
    bits = t.contiguous().view(torch.int32)
    return ((bits + (TF32_HALF_ULP - 1) + ((bits >> 13) & 1)) & TF32_MASK).view(torch.float32)


def cudnn_tf32_ties(stride: tuple[int, int]) -> str:
    """How cuDNN broke TF32 ties on the H200 for the suite's layers (module docstring): to even at stride 1, away from
    zero on the strided ones. What emulates cuDNN where there is no GPU (measure.correctness); on random strided shapes
    cuDNN's algorithms did either."""
    return "even" if tuple(stride) == (1, 1) else "away"


def host_rounding(ties: str) -> Callable[[torch.Tensor], torch.Tensor]:
    """The host rounding for a kernel's TF32_TIES ("away" or "even")."""
    if ties not in TIES:
        raise ValueError(f"ties={ties!r}: one of {TIES}")
    return round_to_tf32_even if ties == "even" else round_to_tf32


@triton.jit
def round_tf32(x):
    """In-kernel twin of round_to_tf32: add half a TF32 ulp to the bits, clear the 13 low mantissa bits."""
    bits = x.to(tl.int32, bitcast=True)
    return ((bits + 0x1000) & -8192).to(tl.float32, bitcast=True)


@triton.jit
def round_tf32_even_bits(x):
    """In-kernel twin of round_to_tf32_even, in integer arithmetic (what the interpreter runs): ties to even."""
    bits = x.to(tl.int32, bitcast=True)
    return ((bits + 0xFFF + ((bits >> 13) & 1)) & -8192).to(tl.float32, bitcast=True)


# The compute capability round_tf32_even_ptx needs on a GPU: PTX's cvt.rn.tf32.f32 is sm_90; ptxas refuses it for sm_80
# and sm_89 (tests/test_portability.py compiles for both). A kernel that rounds with it, or whose input copy does
# (kernels/layout.py), declares this as its KernelVariant.compute_capability.
CVT_RN_TF32_CAPABILITY = (9, 0)

@triton.jit
def round_tf32_even_ptx(x):
    """round_tf32_even_bits in one instruction, PTX's cvt.rn.tf32.f32 (sm_90). In the NHWC kernels' K loop the integer
    version costs 4-7 % against ties away (alexnet_conv5 0.2645 ms, away 0.2471, this 0.2429; same output bits)."""
    bits = tl.inline_asm_elementwise("cvt.rn.tf32.f32 $0, $1;", "=r,f", [x], dtype=tl.int32, is_pure=True, pack=1)
    return bits.to(tl.float32, bitcast=True)


# The kernels' ties-to-even rounding: the PTX instruction where Triton compiles, the integer twin where it interprets
# (no inline assembly there). Triton decides that when a function is decorated, as it did for these.
INTERPRETED = type(round_tf32).__name__ == "InterpretedFunction"
round_tf32_even = round_tf32_even_bits if INTERPRETED else round_tf32_even_ptx
