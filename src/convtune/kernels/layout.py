"""NCHW → channels_last copies for the kernels that read channels_last, tiled through shared memory.

Why our own: torch's `x.contiguous(memory_format=torch.channels_last)` moved the suite's NCHW inputs at about
1.2 TB/s on the H200 (vgg16_conv3_2's 103 MB input in 0.173 ms, resnet50_layer1_1x1's 205 MB in 0.347 ms), a
quarter of the 4.3 TB/s a
plain copy reaches there: one side of its accesses is strided. Each program here reads a [BLOCK_C, BLOCK_P]
tile of one image (channels × positions), coalesced along the positions, and writes it transposed, coalesced
along the channels; Triton moves the tile between the two register layouts through shared memory.

A copy is exact, so any miscompile shows as a difference from torch's copy: tests/gpu_scripts/layout_copy.py
compares the two bit for bit on random shapes.
"""

from __future__ import annotations

from typing import Any

import torch
import triton
import triton.language as tl

from convtune.kernels.runner import bound_runner
from convtune.kernels.precision import round_tf32_even, round_to_tf32_even

# Measured on the H200 against torch's copy (16 tiles of 32-128 channels ×
# 32-128 positions × 4/8 warps): 64 × 64 with 4 warps moved the
# suite's stride-1 inputs at 2.6-3.8 TB/s, 2.1-3.2x torch's speed, within 6 % of each input's best tile but
# resnet50_layer2_3x3's (13 %). With 3 channels (L1 #50's input) every tile lost to torch's copy (0.223 ms
# at the best tile against 0.125 ms: a 3-channel tile is mostly masked), so fewer than MIN_CHANNELS go to
# torch's; 16 matches the threshold below which the library's channels_last kernel does not serve a call and was not probed between 3 and 96.
BLOCK_C, BLOCK_P, NUM_WARPS = 64, 64, 4
MIN_CHANNELS = 16
# The dtypes our copy takes. In 16 bits torch's copy is slower still: KernelBench level 2 #1's input (128 × 64 × 128
# × 128) on the H200 in bfloat16, ours 0.157 ms (3.4 TB/s) against torch's 0.598 (0.9 TB/s); float32 0.288 against
# 0.586
COPY_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


@triton.jit
def _nchw_to_nhwc_kernel(x_ptr, y_ptr, C, HW, tiles_p, BLOCK_C: tl.constexpr, BLOCK_P: tl.constexpr,
                         ROUND: tl.constexpr):
    pid = tl.program_id(0)  # image × position tile: the grid's first axis takes 2**31 - 1 programs
    n = pid // tiles_p
    offs_p = (pid % tiles_p) * BLOCK_P + tl.arange(0, BLOCK_P)
    offs_c = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
    base = n.to(tl.int64) * C * HW
    mask = (offs_c[:, None] < C) & (offs_p[None, :] < HW)
    tile = tl.load(x_ptr + base + offs_c[:, None] * HW + offs_p[None, :], mask=mask)  # [C, P], P contiguous
    if ROUND:  # to nearest TF32, so that the kernel reading the copy need not round its tiles
        tile = round_tf32_even(tile)
    tl.store(y_ptr + base + offs_p[:, None] * C + offs_c[None, :], tl.trans(tile), mask=tl.trans(mask))


def to_channels_last(x: torch.Tensor, block_c: int = BLOCK_C, block_p: int = BLOCK_P,
                     num_warps: int = NUM_WARPS, round_to_nearest_tf32: bool = False) -> torch.Tensor:
    """`x.contiguous(memory_format=torch.channels_last)`, with our copy where `x` is a 4-D NCHW-contiguous
    float32, bfloat16 or float16 tensor with MIN_CHANNELS or more channels that is not channels_last-contiguous
    already; torch's otherwise (few channels, other layouts, dtypes). The tile keywords are for measuring other tiles.
    `round_to_nearest_tf32` (float32 only): the copy's values rounded to nearest TF32, ties to even
    (precision.round_to_tf32_even: the nhwc kernels' TF32_TIES), always a new tensor then."""
    if round_to_nearest_tf32 and x.dtype is not torch.float32:
        raise ValueError(f"rounding to TF32 takes a float32 tensor, got {x.dtype}")
    if x.dim() != 4 or x.dtype not in COPY_DTYPES or not x.is_contiguous() or x.shape[1] < MIN_CHANNELS or \
            x.is_contiguous(memory_format=torch.channels_last) or x.numel() == 0 or \
            x.shape[1] * x.shape[2] * x.shape[3] >= 2**31:  # offsets inside one image are int32
        y = x.contiguous(memory_format=torch.channels_last)
        return rounded_tf32(y) if round_to_nearest_tf32 else y
    n, c, h, w = x.shape
    y = torch.empty_like(x, memory_format=torch.channels_last)
    tiles_p = triton.cdiv(h * w, block_p)
    grid = (n * tiles_p, triton.cdiv(c, block_c))
    key = (grid, c, h * w, tiles_p, block_c, block_p, num_warps, round_to_nearest_tf32, x.dtype, x.get_device(),
           x.data_ptr() & 15, y.data_ptr() & 15)  # the dtype too: a binary reads the element type it was compiled for
    bound = _bound.get(key)
    if bound is not None:  # this binary has run for these arguments: launch it past Triton's dispatch
        bound(x, y, c, h * w, tiles_p)
        return y
    compiled = _nchw_to_nhwc_kernel[grid](x, y, c, h * w, tiles_p, BLOCK_C=block_c, BLOCK_P=block_p,
                                          ROUND=round_to_nearest_tf32, num_warps=num_warps)
    if x.is_cuda:
        bound = bound_runner(compiled, grid, _nchw_to_nhwc_kernel, 5,
                             {"BLOCK_C": block_c, "BLOCK_P": block_p, "ROUND": round_to_nearest_tf32})
        if bound is not None:
            _bound[key] = bound
    return y


# (grid, runtime arguments, tile, rounding, device, alignments) → bound launch (runner.bound_runner): the copy's
# Triton dispatch took 32.7 us of host time a call on the H200.
_bound: dict[tuple, Any] = {}


ROUND_BLOCK = 4096  # elements per program of the rounding pass (a memory-bound elementwise pass; not tuned)


@triton.jit
def _round_tf32_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(y_ptr + offs, round_tf32_even(tl.load(x_ptr + offs, mask=mask)), mask=mask)


def rounded_tf32(x: torch.Tensor) -> torch.Tensor:
    """A copy of `x` in the same memory layout, its values rounded to nearest TF32, ties to even (as precision.round_to_tf32_even):
    one pass over memory where `x` is a dense float32 tensor (contiguous in some dimension order), the host
    function otherwise."""
    dense = x.is_contiguous() or x.is_contiguous(memory_format=torch.channels_last)
    if x.dtype is not torch.float32 or not dense or x.numel() == 0:
        return round_to_tf32_even(x)
    y = torch.empty_like(x)  # a dense tensor's strides are kept: the same element order in memory
    grid = (triton.cdiv(x.numel(), ROUND_BLOCK),)
    key = ("round", grid, x.numel(), x.get_device(), x.data_ptr() & 15, y.data_ptr() & 15)
    bound = _bound.get(key)
    if bound is not None:
        bound(x, y, x.numel())
        return y
    compiled = _round_tf32_kernel[grid](x, y, x.numel(), BLOCK=ROUND_BLOCK, num_warps=4)
    if x.is_cuda:
        bound = bound_runner(compiled, grid, _round_tf32_kernel, 3, {"BLOCK": ROUND_BLOCK})
        if bound is not None:
            _bound[key] = bound
    return y


