"""fold_igemm's plan arithmetic that its kernels and its KernelBench export share: the column split, the tiled fold's
shape, the folded input's rows. Pure Python: no jit code, so no part of the kernel's identity."""

from __future__ import annotations

from typing import Optional

import triton

# Folded elements per program of the tiled fold (_fold_rows_kernel), 8 warps: L1 #50's fold 0.080 ms against 0.100 for
# the elementwise one, which NCU found ALU-bound on its index arithmetic (89 % of the SM's ALU, DRAM 61 %). The tile
# size was not tuned.
FOLD_TILE = 4096


def split_columns(c_out: int, block_n: int) -> bool:
    """Split the column tile into BLOCK_N/2 + BLOCK_N/4 where those cover every output channel and BLOCK_N alone
    would not be needed (L1 #50's 96 channels at BLOCK_N 128: 0.343 against 0.422 ms for the convolution, M128-K32-w4-s3,
    H200); each part must be 16 wide at least (tl.dot)."""
    return block_n >= 64 and block_n // 2 < c_out <= block_n * 3 // 4


def fold_tiling(cf: int, stride: tuple[int, int], wf: int) -> Optional[tuple[int, int]]:
    """(CP, WB) for the tiled fold, _fold_rows_kernel: channels a position loads (a power of two, CP·SH·SW ≥ CF) and
    positions a program folds; None where it does not apply (a stride that is not a power of two, or more than
    FOLD_TILE channels a position), and the elementwise _fold_kernel runs."""
    sh, sw = stride
    if sh & (sh - 1) or sw & (sw - 1):
        return None
    cp = triton.next_power_of_2(-(-cf // (sh * sw)))
    if cp * sh * sw > FOLD_TILE:
        return None
    return cp, min(triton.next_power_of_2(wf), FOLD_TILE // (cp * sh * sw))


def folded_rows(positions: int) -> int:
    """The A descriptor's rows: the folded positions rounded up to a multiple of 16, for every batch, so that the
    binary the one-image check runs (_right_at) is the one the real call runs whatever Triton specialises on the
    descriptor's shape. The rows past the folded input (the buffer holds them: fold) feed only outputs that are
    not stored (q past OH·WF), as do the KWF - 1 positions a row's taps reach past them."""
    return -(-positions // 16) * 16
