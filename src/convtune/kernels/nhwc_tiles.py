"""What the NHWC-ordered implicit GEMMs share (the channels_last kernels, and the weight operand of the one that
reads NCHW): the weight packed as [C_out, KH, KW, C_in] with its TMA descriptor, the tile order, the rule for TF32
ties, the default configurations, and the jit tile helpers of the split schedules (a tile's coordinates, its sum over
a run of K steps, its store). Variants import these from here, never from one another.
"""

from __future__ import annotations

import weakref
from typing import Any

import torch
import triton
import triton.language as tl

from convtune.kernels.meta import Meta
from convtune.kernels.runner import WeightCache
from convtune.kernels.precision import round_to_tf32_even

GROUP_M = 8
# How `tf32` breaks rounding ties: to even, as cuDNN does on the stride-1 layers this kernel serves (kernels/precision.py;
# resnet50_layer1_1x1 3.1e-6 from cuDNN that way, 1.9e-4 with ties away, which failed KernelBench's allclose)
TF32_TIES = "even"


_packed = WeightCache()  # the weight in [C_out, KH, KW, C_in] order (TF32-rounded for tf32), until it changes
_split = WeightCache()  # split_weight's


def pack_weight(weight: torch.Tensor, round_tf32: bool) -> torch.Tensor:
    """[C_out, C_in, KH, KW] → [C_out, KH, KW, C_in] contiguous, rounded to nearest TF32 if asked; always 16-byte
    aligned (a channels_last weight is already in that order, and may be a view at any offset: then a copy), so
    that its TMA descriptor depends on C_in alone (tma_fits)."""
    w = weight.permute(0, 2, 3, 1).contiguous()
    w = round_to_tf32_even(w) if round_tf32 else w
    return w.clone() if w.data_ptr() % 16 else w


def packed_weight(weight: torch.Tensor, round_tf32: bool) -> torch.Tensor:
    return _packed.get(weight, (round_tf32,), lambda w: pack_weight(w, round_tf32))


def pack_split(weight: torch.Tensor) -> torch.Tensor:
    """pack_weight's order as [2·C_out, KH, KW, C_in]: the weight rounded to nearest TF32, then what that rounding
    left. TF32 products with the two are within about 2^-21 of products with the float32 weight (the MMA truncates
    the remainder to TF32)."""
    full = pack_weight(weight, False)
    high = round_to_tf32_even(full)
    return torch.cat((high, full - high))


def split_weight(weight: torch.Tensor) -> torch.Tensor:
    """pack_split's, until the weight changes (a cache of its own: a call may take both forms)."""
    return _split.get(weight, (), pack_split)


def tma_fits(c_in: int, element_bytes: int = 4) -> bool:
    """A TMA descriptor of the packed [C_out, KH, KW, C_in] weight (16-byte aligned: pack_weight) needs every
    tile a 16-byte aligned start along K: tap·C_in + a multiple of BLOCK_K, so C_in·element_bytes a multiple of 16."""
    return (c_in * element_bytes) % 16 == 0


# (id of a packed weight, its data pointer, BLOCK_N, BLOCK_K) → its TMA descriptor, made once and dropped when the
# packed weight is (TensorDescriptor.from_tensor took 6.9 us a call on the H200's host)
_descriptors: dict[tuple[int, int, int, int], Any] = {}


def weight_arg(cx: dict, wp: torch.Tensor) -> Any:
    """The kernel's weight argument: a TMA descriptor of the packed weight as [C_out, K] (W_TMA), or the weight. The
    descriptor is kept while `wp` lives: it describes a detached alias of `wp`, which holds the memory but not `wp`
    itself (a view would keep `wp` alive, and with it every packed weight an optimiser step replaced)."""
    if not cx["W_TMA"]:
        return wp
    key = (id(wp), wp.data_ptr(), cx["BLOCK_N"], cx["BLOCK_K"])
    described = _descriptors.get(key)
    if described is None:
        from triton.tools.tensor_descriptor import TensorDescriptor

        alias = wp.detach().view(wp.shape[0], -1)
        described = _descriptors[key] = TensorDescriptor.from_tensor(alias, [cx["BLOCK_N"], cx["BLOCK_K"]])
        weakref.finalize(wp, _descriptors.pop, key, None)
    return described


def default_meta(out_channels: int, stride_w: int, width: int, precision: str = "tf32") -> Meta:
    """The default configuration per problem class, from the H200 sweep with TMA weight tiles
    (BM 64/128 × BN 128/256 × w 4/8, BK 32, s3), by C_out: a 256-wide tile where one covers every channel (alexnet_conv2's
    192 and conv5's 256: M64-N256-w4 best, 0.691 and 0.245 ms; vgg16_conv3_2 3 % behind its best); three
    128-wide tiles for 384 (alexnet_conv3/4: M128-N128-w8 best, M64-N256 2.0-2.2x slower); M64-N128-w4 for 128
    (resnet50_layer2_3x3 best); M64-N64-w4 up to 64 (resnet50_layer1_1x1, the first sweep). M128-N256 with 4
    warps runs 21-27x slower (its accumulator alone is 256 registers a thread). A pin for the exact problem and
    GPU takes precedence (convtune.pins)."""
    if precision not in ("tf32", "tf32_trunc"):  # three products or FMA per multiply: smaller tiles (untuned)
        return Meta(BLOCK_M=64, BLOCK_N=64, BLOCK_K=32, num_warps=4, num_stages=3)
    if out_channels <= 64:
        return Meta(BLOCK_M=64, BLOCK_N=64, BLOCK_K=32, num_warps=4, num_stages=3)
    if out_channels <= 128:
        return Meta(BLOCK_M=64, BLOCK_N=128, BLOCK_K=32, num_warps=4, num_stages=3)
    if out_channels <= 256:
        return Meta(BLOCK_M=64, BLOCK_N=256, BLOCK_K=32, num_warps=4, num_stages=3)
    return Meta(BLOCK_M=128, BLOCK_N=128, BLOCK_K=32, num_warps=8, num_stages=3)


def default_meta_preround(out_channels: int, stride_w: int, width: int, precision: str = "tf32") -> Meta:
    """The pre-rounding kernels' default per problem class: the best of the pre-rounded column of the H200 grid (BM 64/128 ×
    BN 128/256 × w 4/8 × s 3/4, BK 32), by C_out: 384 (alexnet_conv3/4)
    M128-N128-w4-s3 (0.254 and 0.365 ms); 256 and 192 (alexnet_conv5, vgg16_conv3_2, alexnet_conv2) M128-N256-w8-s4
    (0.237, 0.331, 0.644; s3 within 1 %); 128 (resnet50_layer2_3x3) M128-N128-w8-s3 (0.062). Up to 64 channels, and
    for precisions with nothing to round first, default_meta (not swept this way)."""
    if precision != "tf32" or out_channels <= 64:
        return default_meta(out_channels, stride_w, width, precision)
    if out_channels <= 128:
        return Meta(BLOCK_M=128, BLOCK_N=128, BLOCK_K=32, num_warps=8, num_stages=3)
    if out_channels <= 256:
        return Meta(BLOCK_M=128, BLOCK_N=256, BLOCK_K=32, num_warps=8, num_stages=4)
    return Meta(BLOCK_M=128, BLOCK_N=128, BLOCK_K=32, num_warps=4, num_stages=3)




@triton.jit
def _tile_at(tile, M, C_OUT: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, GROUP: tl.constexpr):
    """Tile number → (row tile, column tile), in groups of GROUP row tiles per column tile (the order of every NHWC kernel here)."""
    tiles_m = tl.cdiv(M, BLOCK_M)
    TILES_N: tl.constexpr = (C_OUT + BLOCK_N - 1) // BLOCK_N
    per_group = GROUP * TILES_N
    first_m = (tile // per_group) * GROUP
    group_rows = tl.minimum(tiles_m - first_m, GROUP)
    return first_m + (tile % per_group) % group_rows, (tile % per_group) // group_rows


@triton.jit
def _tile_sum(x_ptr, w_ptr, pid_m, pid_n, M, k_lo, k_hi,
              C: tl.constexpr, H: tl.constexpr, W: tl.constexpr, C_OUT: tl.constexpr, OH: tl.constexpr,
              OW: tl.constexpr, KH: tl.constexpr, KW: tl.constexpr, SH: tl.constexpr, SW: tl.constexpr, PH: tl.constexpr,
              PW: tl.constexpr, DH: tl.constexpr, DW: tl.constexpr, PRECISION: tl.constexpr, W_TMA: tl.constexpr,
              BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """A tile's products over K steps k_lo to k_hi (a K step: BLOCK_K channels of one tap), A as it is in memory."""
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    m_mask = offs_m < M
    OHW: tl.constexpr = OH * OW
    img = offs_m // OHW
    p = offs_m % OHW
    ih0 = (p // OW) * SH - PH
    iw0 = (p % OW) * SW - PW
    x_rows = x_ptr + img.to(tl.int64) * (H * W * C)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    n_mask = offs_n < C_OUT
    C_BLOCKS: tl.constexpr = (C + BLOCK_K - 1) // BLOCK_K
    K_TOTAL: tl.constexpr = KH * KW * C
    offs_k = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for t in range(k_lo, k_hi):  # pipelined num_stages deep; never fewer than num_stages steps (the module's doc)
        tap = t // C_BLOCKS
        c = (t % C_BLOCKS) * BLOCK_K + offs_k
        ih = ih0 + (tap // KW) * DH
        iw = iw0 + (tap % KW) * DW
        inside = m_mask & (ih >= 0) & (ih < H) & (iw >= 0) & (iw < W)
        a = tl.load(x_rows[:, None] + ((ih * W + iw) * C)[:, None] + c[None, :],
                    mask=inside[:, None] & (c < C)[None, :], other=0.0)
        if W_TMA:  # past C the tile holds the next tap's weights, multiplied by A's zeros; past K, zeros
            b = w_ptr.load([pid_n * BLOCK_N, tap * C + (t % C_BLOCKS) * BLOCK_K]).T
        else:
            b = tl.load(w_ptr + offs_n[None, :] * K_TOTAL + (tap * C + c)[:, None],
                        mask=(c < C)[:, None] & n_mask[None, :], other=0.0)
        acc = tl.dot(a, b, acc, input_precision=PRECISION)
    return acc


@triton.jit
def _store_tile(acc, b_ptr, y_ptr, pid_m, pid_n, M, C_OUT: tl.constexpr, OHW: tl.constexpr, HAS_BIAS: tl.constexpr,
                OUT_CL: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """A tile's sum plus the bias into the output: channels_last (a row's channels contiguous) or NCHW."""
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    m_mask = offs_m < M
    n_mask = offs_n < C_OUT
    if HAS_BIAS:
        acc += tl.load(b_ptr + offs_n, mask=n_mask, other=0.0)[None, :]
    if OUT_CL:
        y_offs = offs_m.to(tl.int64)[:, None] * C_OUT + offs_n[None, :]
    else:
        y_offs = ((offs_m // OHW).to(tl.int64) * (C_OUT * OHW) + offs_m % OHW)[:, None] + offs_n[None, :] * OHW
    tl.store(y_ptr + y_offs, acc, mask=m_mask[:, None] & n_mask[None, :])
