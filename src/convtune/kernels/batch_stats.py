"""A batch norm in training mode (`bn_train`) fused after a convolution, in two passes of the same kernel.

torch.nn.BatchNorm2d while training normalizes each channel by the batch's mean and biased variance over (N, H, W),
which exist only once every output of the batch does. A kernel that fuses it runs twice:

1. the statistics pass (its STATS constexpr): the convolution and its bias, rounded to the output's dtype as torch's
   batch norm would read it, summed per channel with its squares (`add_batch_stats`) into a float64 [2, C_out] buffer
   by atomic adds; it stores no output. Each tile adds float32 sums of its own rows, so a sum over the 2.03 million
   positions of KernelBench level 2 #73 is a float64 sum of 16,128 float32 partial sums of 126 values each (a tile
   of 128 columns on a row of 126).
2. `normalized` turns the sums into the op's rows (`_bn_rows_kernel`, one small launch): scale = γ/√(var + eps) and
   shift = β − mean·scale, in float64, with var = E[y²] − mean² (float64 keeps the cancellation harmless: the mean of
   a channel is within a few standard deviations of zero in a convolution's output); then the convolution runs again
   with the chain as pointwise ops, bn_train's being bn's branch with those rows.

Recomputing the convolution costs its FLOPs twice and the output's bytes once; storing the output in the first pass
and normalizing it in a third would move the output three times (0.52 GB for #73 in float32, a write, a read and a
write).
"""

from __future__ import annotations

from typing import Optional

import torch
import triton
import triton.language as tl

from convtune.kernels.epilogue import Epilogue
from convtune.problem import BN_EPS

@triton.jit
def add_batch_stats(acc, s_ptr, offs_n, n_mask, m_mask, C_OUT: tl.constexpr, OUT_DTYPE: tl.constexpr):
    """Add the per-channel sum of `acc`'s rows under `m_mask` (the tile's positions inside the output) and the sum of
    their squares into s_ptr's float64 rows 0 and 1 ([2, C_OUT]), `acc` rounded to a 16-bit OUT_DTYPE first, as the
    batch norm that follows the convolution reads it in torch."""
    if OUT_DTYPE != tl.float32:
        acc = acc.to(OUT_DTYPE).to(tl.float32)
    acc = tl.where(m_mask[:, None], acc, 0.0)
    tl.atomic_add(s_ptr + offs_n, tl.sum(acc, axis=0).to(tl.float64), mask=n_mask, sem="relaxed")
    tl.atomic_add(s_ptr + C_OUT + offs_n, tl.sum(acc * acc, axis=0).to(tl.float64), mask=n_mask, sem="relaxed")


@triton.jit
def _bn_rows_kernel(s_ptr, v_ptr, out_ptr, rm_ptr, rv_ptr, count, momentum, eps,
                    C_OUT: tl.constexpr, ROWS: tl.constexpr, RUNNING: tl.constexpr, BLOCK: tl.constexpr):
    """out ([ROWS, C_OUT] float32) = the vectors at v_ptr, but rows 0 and 1 (bn_train's: γ and β there) replaced by
    the batch's scale and shift from the sums at s_ptr over `count` positions; with RUNNING, the running mean and
    (unbiased) variance at rm_ptr and rv_ptr moved by `momentum` towards the batch's, as BatchNorm2d does."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < C_OUT
    count = count.to(tl.float64)
    mean = tl.load(s_ptr + offs, mask=mask, other=0.0) / count
    var = tl.maximum(tl.load(s_ptr + C_OUT + offs, mask=mask, other=0.0) / count - mean * mean, 0.0)
    gamma = tl.load(v_ptr + offs, mask=mask, other=0.0).to(tl.float64)
    beta = tl.load(v_ptr + C_OUT + offs, mask=mask, other=0.0).to(tl.float64)
    scale = gamma / tl.sqrt(var + eps)
    tl.store(out_ptr + offs, scale.to(tl.float32), mask=mask)
    tl.store(out_ptr + C_OUT + offs, (beta - mean * scale).to(tl.float32), mask=mask)
    for r in tl.static_range(2, ROWS):
        tl.store(out_ptr + r * C_OUT + offs, tl.load(v_ptr + r * C_OUT + offs, mask=mask).to(tl.float32), mask=mask)
    if RUNNING:
        rm = tl.load(rm_ptr + offs, mask=mask).to(tl.float64)
        rv = tl.load(rv_ptr + offs, mask=mask).to(tl.float64)
        tl.store(rm_ptr + offs, ((1.0 - momentum) * rm + momentum * mean).to(rm_ptr.dtype.element_ty), mask=mask)
        unbiased = var * (count / tl.maximum(count - 1.0, 1.0))
        tl.store(rv_ptr + offs, ((1.0 - momentum) * rv + momentum * unbiased).to(rv_ptr.dtype.element_ty), mask=mask)


def new_sums(c_out: int, device: torch.device) -> torch.Tensor:
    """The statistics pass's buffer: float64 [2, c_out] zeros (per-channel sums of y and of y²)."""
    return torch.zeros((2, c_out), dtype=torch.float64, device=device)


def bn_rows(sums: torch.Tensor, vectors: torch.Tensor, count: int, running: "Optional[tuple]" = None,
            eps: float = 1e-5, block: int = 256) -> torch.Tensor:
    """float32 `vectors` whose rows 0 and 1 (bn_train's γ and β) are the batch's scale and shift, from the statistics
    pass's `sums` over `count` positions (one launch of _bn_rows_kernel); `running`: (running_mean, running_var,
    momentum) of a BatchNorm2d, moved towards the batch's as it does in training. KernelBench's export copies it."""
    c_out = vectors.shape[1]
    rows = torch.empty(tuple(vectors.shape), dtype=torch.float32, device=vectors.device)
    rm, rv, momentum = running if running is not None else (rows, rows, 0.0)
    _bn_rows_kernel[(triton.cdiv(c_out, block),)](
        sums, vectors, rows, rm, rv, int(count), float(momentum), eps, C_OUT=c_out, ROWS=vectors.shape[0],
        RUNNING=running is not None, BLOCK=block)
    return rows


def normalized(ep: Epilogue, sums: torch.Tensor, count: int) -> Epilogue:
    """`ep` (whose first op is bn_train) with its vectors as bn_rows makes them: the chain the second pass runs,
    every op pointwise."""
    if not ep.chain or ep.chain[0] != "bn_train":
        raise ValueError(f"normalized takes a chain that starts with bn_train, got {list(ep.chain)}")
    return Epilogue(ep.chain, bn_rows(sums, ep.vectors, count, None, BN_EPS), ep.residual)  # type: ignore[arg-type]
