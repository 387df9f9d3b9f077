"""The one-time check of a freshly compiled binary (see kernels/llvm_opt.py for why): small random inputs
with the alignment of the real call, and the test that tells a miscompiled binary from rounding."""

from __future__ import annotations

from typing import Optional

import torch
import torch.nn.functional as F

# Relative L2 error allowed against float64, by tl.dot's input precision. tf32 lands near 3e-4 and
# tf32x3/ieee near 1e-7 on random data; the miscompiled binaries seen were 0.06-1.4 off.
TOLERANCE = {"tf32": 5e-3, "tf32x3": 1e-4, "ieee": 1e-4}


def aligned_random(shape: tuple[int, ...], like: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    """Uniform(-1, 1) values in a new tensor whose data pointer has `like`'s offset from a 16-byte boundary,
    so that Triton compiles the same specialisation (it keys binaries on 16-byte pointer alignment)."""
    skew = (like.data_ptr() % 16) // like.element_size()
    numel = 1
    for s in shape:
        numel *= s
    storage = torch.rand(skew + numel, generator=gen, device=like.device, dtype=like.dtype) * 2 - 1
    return storage[skew:].view(shape)


def aligned_nan(shape: tuple[int, ...], like: torch.Tensor) -> torch.Tensor:
    skew = (like.data_ptr() % 16) // like.element_size()
    numel = 1
    for s in shape:
        numel *= s
    return torch.full((skew + numel,), float("nan"), device=like.device, dtype=like.dtype)[skew:].view(shape)


def agrees(out: torch.Tensor, x: torch.Tensor, w: torch.Tensor, b: Optional[torch.Tensor], stride: tuple[int, int],
           padding: tuple[int, int], dilation: tuple[int, int], dot_precision: str) -> bool:
    """True if `out` is conv2d(x, w, b) to within the rounding of `dot_precision`, everywhere."""
    ref = F.conv2d(x.double(), w.double(), None if b is None else b.double(), stride, padding, dilation)
    if not bool(torch.isfinite(out).all()):
        return False
    diff = out.double() - ref
    tol = TOLERANCE[dot_precision]
    scale = float(ref.abs().max()) or 1.0
    return float(diff.norm()) <= tol * float(ref.norm()) + 1e-30 and float(diff.abs().max()) <= 20 * tol * scale
