"""The one-time check of a freshly compiled binary (see kernels/llvm_opt.py for why): small random inputs
with the alignment of the real call, and the test that tells a miscompiled binary from rounding."""

from __future__ import annotations

import math
from typing import Callable, Optional

import torch
import torch.nn.functional as F

from convtune.kernels.epilogue import NO_EPILOGUE, Epilogue, torch_chain

# Relative L2 error allowed against float64, by tl.dot's input precision. tf32 lands near 3e-4 and
# tf32x3/ieee near 1e-7 on random data; the miscompiled binaries seen were 0.06-1.4 off.
TOLERANCE = {"tf32": 5e-3, "tf32x3": 1e-4, "ieee": 1e-4}
# ... and by a 16-bit output's own rounding (unit roundoff 2^-8 for bfloat16, 2^-11 for float16), whatever the dot
HALF_TOLERANCE = {torch.bfloat16: 1e-2, torch.float16: 5e-3}


def _aligned(shape: tuple[int, ...], like: torch.Tensor, fill: Callable[[int], torch.Tensor]) -> torch.Tensor:
    """A new tensor whose data pointer has `like`'s offset from a 16-byte boundary, so that Triton compiles the
    same specialisation as for `like` (it keys binaries on 16-byte pointer alignment)."""
    skew = (like.data_ptr() % 16) // like.element_size()
    return fill(skew + math.prod(shape))[skew:].view(shape)


def aligned_random(shape: tuple[int, ...], like: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    """Uniform(-1, 1) values, aligned as `like`."""
    return _aligned(shape, like, lambda n: torch.rand(n, generator=gen, device=like.device, dtype=like.dtype) * 2 - 1)


def aligned_nan(shape: tuple[int, ...], like: torch.Tensor) -> torch.Tensor:
    return _aligned(shape, like, lambda n: torch.full((n,), float("nan"), device=like.device, dtype=like.dtype))


def check_inputs(batch: int, x: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor], out: torch.Tensor
                 ) -> tuple[torch.Tensor, torch.Tensor, Optional[torch.Tensor], torch.Tensor]:
    """Random input (`batch` images), weight and bias, and a NaN output, shaped and aligned as the real call's."""
    gen = torch.Generator(device=x.device).manual_seed(20261122)
    xs = aligned_random((batch,) + tuple(x.shape[1:]), x, gen)
    ws = aligned_random(tuple(weight.shape), weight, gen)
    bs = aligned_random(tuple(bias.shape), bias, gen) if bias is not None else None
    return xs, ws, bs, aligned_nan((batch,) + tuple(out.shape[1:]), out)


def check_epilogue(ep: Epilogue, out: torch.Tensor) -> Epilogue:
    """Random epilogue tensors for the one-image check whose output is `out` (an NCHW-shaped view in its real layout):
    vectors aligned as `ep`'s, a residual laid out and aligned as the output (as the kernel reads it)."""
    if not ep.chain:
        return NO_EPILOGUE
    gen = torch.Generator(device=out.device).manual_seed(20261128)
    vectors = aligned_random(tuple(ep.vectors.shape), ep.vectors, gen) if ep.vectors is not None else None
    residual = None
    if ep.residual is not None:
        n, k, oh, ow = out.shape
        cl = out.stride(1) == 1 and k > 1
        residual = (aligned_random((n, oh, ow, k), out, gen).permute(0, 3, 1, 2) if cl
                    else aligned_random((n, k, oh, ow), out, gen))
    return Epilogue(ep.chain, vectors, residual)


def agrees(out: torch.Tensor, x: torch.Tensor, w: torch.Tensor, b: Optional[torch.Tensor], stride: tuple[int, int],
           padding: tuple[int, int], dilation: tuple[int, int], dot_precision: str,
           epilogue: Epilogue = NO_EPILOGUE) -> bool:
    """True if `out` is conv2d(x, w, b) followed by `epilogue` to within the rounding of `dot_precision`,
    everywhere."""
    ref = F.conv2d(x.double(), w.double(), None if b is None else b.double(), stride, padding, dilation)
    if epilogue.chain:
        ref = torch_chain(ref, epilogue, torch.float64)
    if not bool(torch.isfinite(out).all()):
        return False
    diff = out.double() - ref
    tol = max(TOLERANCE[dot_precision], HALF_TOLERANCE.get(out.dtype, 0.0))
    scale = float(ref.abs().max()) or 1.0
    return float(diff.norm()) <= tol * float(ref.norm()) + 1e-30 and float(diff.abs().max()) <= 20 * tol * scale


def sums_agree(sums: torch.Tensor, x: torch.Tensor, w: torch.Tensor, b: Optional[torch.Tensor],
               stride: tuple[int, int], padding: tuple[int, int], dilation: tuple[int, int], dot_precision: str,
               out_dtype: torch.dtype) -> bool:
    """True if `sums` (bn_train's statistics pass, kernels/batch_stats.py: [2, C] sums of y and y² per channel) are
    float64's for y = conv2d(x, w, b), to within the rounding of `dot_precision` and of `out_dtype` on each term."""
    y = F.conv2d(x.double(), w.double(), None if b is None else b.double(), stride, padding, dilation)
    tol = max(TOLERANCE[dot_precision], HALF_TOLERANCE.get(out_dtype, 0.0))
    bound = torch.stack((y.abs().sum(dim=(0, 2, 3)), (y * y).sum(dim=(0, 2, 3)) * 2)) * tol + 1e-30
    ref = torch.stack((y.sum(dim=(0, 2, 3)), (y * y).sum(dim=(0, 2, 3))))
    return bool(torch.isfinite(sums).all()) and bool(((sums.double() - ref).abs() <= bound).all())
