"""Packed weights that variants share: kernel rows widened to their aligned window, TF32-rounded (pack_weight),
and the folded weight of the space-to-depth kernels (fold_weight).

pack_weight's result is made in one launch. A layer being trained repacks after every optimizer step, at the start of its forward,
while the GPU waits: the four torch operations of pack_weight took 331 µs of host time there against 395 µs for
torch's whole stem convolution (H200, ResNet-50 train step, batch 32).
This kernel writes every element of the packed tensor, the zero taps too, so nothing is allocated zeroed first;
on CUDA its compiled binary is launched through a bound runner, as a variant's `bind` does."""

from __future__ import annotations

from typing import Any, Callable

import torch
import triton
import triton.language as tl

from convtune.kernels.precision import round_tf32

BLOCK = 1024


@triton.jit
def _pack_kernel(w_ptr, out_ptr, TOTAL: tl.constexpr, KW: tl.constexpr, KWP: tl.constexpr, START: tl.constexpr,
                 ROUND: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    inside = offs < TOTAL
    tap = offs % KWP - START  # the column of the original kernel row, outside [0, KW) for a zero tap
    keep = inside & (tap >= 0) & (tap < KW)
    v = tl.load(w_ptr + (offs // KWP) * KW + tap, mask=keep, other=0.0)
    if ROUND:
        v = round_tf32(v)
    tl.store(out_ptr + offs, v, mask=inside)


def window_start(kw: int, kwp: int, pad_w: int, j0: int) -> int:
    """Where a row's kw taps start inside its KWP-wide window: pack_weight's `[-pad_w - j0: -pad_w - j0 + kw]`."""
    taps = range(kwp)[-pad_w - j0: -pad_w - j0 + kw]
    if len(taps) != kw:
        raise ValueError(f"a row of {kw} taps does not fit its window of {kwp} at offset {-pad_w - j0}")
    return taps.start


# (device, weight shape, KWP, start, round) → a launcher bound to its compiled binary and grid
_runners: dict[tuple[Any, ...], Callable[[torch.Tensor, torch.Tensor], None]] = {}


def pack(weight: torch.Tensor, kwp: int, start: int, round_tf32: bool) -> torch.Tensor:
    """A new contiguous [C_out, C, KH, kwp] tensor: each row's taps at `start`, zeros elsewhere, rounded to TF32
    if asked (float32 only). `weight` must be contiguous."""
    out = torch.empty(weight.shape[:3] + (kwp,), dtype=weight.dtype, device=weight.device)
    key = (weight.device, weight.dtype, tuple(weight.shape), kwp, start, round_tf32)
    run = _runners.get(key)
    if run is None:
        run = _runners[key] = _bind(weight, out, kwp, start, round_tf32)
    run(weight, out)
    return out


def _bind(weight: torch.Tensor, out: torch.Tensor, kwp: int, start: int,
          round_tf32: bool) -> Callable[[torch.Tensor, torch.Tensor], None]:
    constexprs = dict(TOTAL=out.numel(), KW=weight.shape[3], KWP=kwp, START=start, ROUND=round_tf32, BLOCK=BLOCK)
    grid = (triton.cdiv(out.numel(), BLOCK),)
    if weight.device.type == "cuda" and isinstance(_pack_kernel, triton.runtime.JITFunction):
        compiled = _pack_kernel.warmup(weight, out, **constexprs, grid=grid)
        if hasattr(type(compiled), "__getitem__"):  # a Triton whose compiled kernel has a runner
            runner = compiled[(grid[0], 1, 1)]
            tail = tuple(constexprs[n] for n in _pack_kernel.arg_names[2:])
            return lambda w, o: runner(w, o, *tail)
    return lambda w, o: _pack_kernel[grid](w, o, **constexprs)


def folded_channels(c: int, stride: tuple[int, int], element_bytes: int = 4) -> int:
    """C·SH·SW rounded up to a multiple of 16 bytes (4 float32 or 8 16-bit channels): the folded rows' stride must be
    one for TMA."""
    per = 16 // element_bytes
    return -(-c * stride[0] * stride[1] // per) * per


def fold_weight(weight: torch.Tensor, stride: tuple[int, int], taps: tuple[int, int], cf: int,
                row_pad: int) -> torch.Tensor:
    """[C_out, C, KH, KW] → [C_out, KHF·ROW_PAD], in the weight's dtype: kernel row a of the folded weight is its KWF taps × CF
    channels (channel (c·SH + r)·SW + s of tap b is weight[c, SH·a + r, SW·b + s], zero past the kernel), as a row
    of the folded input lies in memory, then zeros to ROW_PAD. Plain torch: the KernelBench export copies it."""
    c_out, c, kh, kw = weight.shape
    sh, sw = stride
    khf, kwf = taps
    w = torch.nn.functional.pad(weight.detach(), (0, kwf * sw - kw, 0, khf * sh - kh))
    w = w.reshape(c_out, c, khf, sh, kwf, sw).permute(0, 2, 4, 1, 3, 5).reshape(c_out, khf, kwf, c * sh * sw)
    w = torch.nn.functional.pad(w, (0, cf - c * sh * sw)).reshape(c_out, khf, kwf * cf)
    return torch.nn.functional.pad(w, (0, row_pad - kwf * cf)).reshape(c_out, khf * row_pad).contiguous()
