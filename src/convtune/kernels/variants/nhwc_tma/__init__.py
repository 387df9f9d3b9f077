"""`nhwc_tma`: the stride-1 implicit GEMM over channels_last tensors, both operands loaded by TMA.

nhwc_igemm gathers each A tile with pointer loads (an address and a mask per row) and rounds it to TF32 in registers.
At stride 1 the A tile of one tap needs neither: BLOCK_M consecutive output columns of one output row read BLOCK_M
consecutive input columns of one input row, a box [1, 1, BLOCK_M, BLOCK_K] of the NHWC input at (image, oh + kh·DH
- PH, ow0 + kw·DW - PW, channel block). TMA loads that box, and fills with zeros what lies outside the input (the
padding, the columns past the row's end, the channels past C), so the K loop is two TMA loads and one MMA a step,
pipelined num_stages deep, with A read by the MMA straight from shared memory. The input comes rounded to nearest
TF32 (ties to even, cuDNN's rule at stride 1) from the channels_last copy, which an NCHW input needs anyway
(layout.to_channels_last); the weight is rounded once, when packed. At tf32x3 (for the layers cuDNN runs in full
float32, KernelBench level 2 #73's 8-channel convolution among them: 9.7e-7 from the exact sum, 5.2e-4 from the sum
of TF32-rounded operands) the input comes as it is and each step runs three TF32 products (_step): the weight's TF32
halves come by TMA from a split copy made once (nhwc_tiles.split_weight), the input's tile is split in registers.

A chain that starts with bn_train (a batch norm with the batch's statistics) runs the kernel twice: a statistics pass
(STATS) and the convolution with the batch's rows (kernels/batch_stats.py).

A tile is BLOCK_M columns of one output row: a row narrower than BLOCK_M leaves the rest of the tile idle (OW 126
at BLOCK_M 128: 98 % used; OW 56: 44 %). The K loop runs over taps × channel blocks, as nhwc_igemm's, or, for few
channels without column padding or dilation, over kernel rows × blocks of a row's KW·C contiguous values, one box of an
overlapping view of the input each (window_fits, window_view); tiles are taken in groups of GROUP_M row tiles per
column tile.

What it takes (make_plan refuses the rest): stride 1, input channels whose rows are 16-byte aligned (C_in a multiple
of 4 in float32, 8 in 16 bits: TMA's strides), precision tf32 or tf32x3 in float32 or a 16-bit dtype, BLOCK_M up to
256 (a TMA box's side).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

import torch
import triton
import triton.language as tl

from convtune.errors import UnsupportedProblem
from convtune.kernels import batch_stats, llvm_opt
from convtune.kernels.batch_stats import add_batch_stats
from convtune.kernels.base import KernelVariant, Knob, Space, plan_refuses, register
from convtune.kernels.conv_args import ConvGeometry
from convtune.kernels.epilogue import NO_EPILOGUE, Epilogue, apply_epilogue, code
from convtune.kernels.host import BoundLaunches, Host, alignment_key, one_image
from convtune.kernels.identity import KernelSource
from convtune.kernels.layout import _nchw_to_nhwc_kernel, _round_tf32_kernel, to_channels_last
from convtune.kernels.meta import Meta, safe_stages
from convtune.kernels.nhwc_tiles import GROUP_M, TF32_TIES, pack_split, pack_weight, packed_weight, split_weight
from convtune.kernels.precision import (CVT_RN_TF32_CAPABILITY, dot_precision, round_tf32_even, round_tf32_even_bits,
                                        round_tf32_even_ptx, round_to_tf32_even)
from convtune.kernels.selfcheck import agrees, check_epilogue, sums_agree
from convtune.problem import EPILOGUE_OPS

RESTRICTED_TO = ("stride 1, input channels a multiple of 4 in float32 (8 in 16 bits), precision tf32 or tf32x3 or a "
                 "16-bit dtype, BLOCK_M up to 256")
# float32's math it takes: tf32 (the input and weight come rounded to TF32, the MMA takes them as they are) and tf32x3
# (three TF32 products a multiply, for the layers cuDNN runs in full float32: _step)
PRECISIONS = ("tf32", "tf32x3")
DTYPES = ("float32", "bfloat16", "float16")
COMPUTE_CAPABILITY = CVT_RN_TF32_CAPABILITY  # sm_90: TMA, and the input copy's cvt.rn.tf32
SPACE = Space("nhwc_tma", (
    Knob("BLOCK_M", (64, 128, 256), "output columns of one row a tile: one TMA box of the input"),
    Knob("BLOCK_N", (64, 128, 256), "output channels a tile: one TMA box of the weight"),
    Knob("BLOCK_K", (16, 32, 64), "input channels a K step"),
))


@triton.jit
def _step(acc, a, w_desc, row, k, C_OUT: tl.constexpr, PRECISION: tl.constexpr, PRODUCTS: tl.constexpr):
    """acc + a · the weight's tile at (row, k). PRODUCTS 1: one dot at PRECISION. PRODUCTS 3 (tf32x3) or 2
    (stats_pass): TF32 products, with the weight split when packed (split_weight: its TF32 rounding, and from row
    C_OUT on the remainder) and the tile of `a` split here into its rounding to nearest TF32 and the remainder:
    high·rest + rest·high + high·high (2: without rest·high) summed by the MMAs into a sum of the step's own, then
    added to acc. Why so (H200, Triton 3.6):
    - the MMA truncates each sum it adds to: with the products summed into acc itself, 7 of 40 random shapes with
      long K loops missed float64 by more than verify's 1e-5 (up to 3.2e-5); with high·high alone summed into acc, 1
      (1.06e-5); Triton's own tf32x3 (it splits the weight in registers too, every step, and stores its halves back
      to shared memory for the MMA) and this, none;
    - the add makes the step's MMAs finish before the next step: left in flight across steps, with A from registers,
      they gave nondeterministic outputs (BLOCK_K 16, 4 warps, 3 stages: 8.3e-4 from float64)."""
    b = w_desc.load([row, k]).T
    if PRODUCTS == 1:
        acc = tl.dot(a, b, acc, input_precision=PRECISION)
    else:
        high = round_tf32_even(a)
        step = tl.dot(high, w_desc.load([C_OUT + row, k]).T, input_precision="tf32")
        if PRODUCTS == 3:
            step = tl.dot(a - high, b, step, input_precision="tf32")
        acc += tl.dot(high, b, step, input_precision="tf32")
    return acc


@triton.jit(do_not_specialize=["N"])  # one binary for every batch: the one-time check (batch 1) checks it
def _conv2d_nhwc_tma_kernel(
    x_desc, w_desc, b_ptr, y_ptr, e_ptr, r_ptr, N,  # x_desc: [N, H, W, C] or [N, H, OW, KW·C]; w_desc: [C_OUT, K]
    C: tl.constexpr, C_OUT: tl.constexpr, OH: tl.constexpr, OW: tl.constexpr, KH: tl.constexpr, KW: tl.constexpr,
    PH: tl.constexpr, PW: tl.constexpr, DH: tl.constexpr, DW: tl.constexpr,
    HAS_BIAS: tl.constexpr, PRECISION: tl.constexpr, OUT_CL: tl.constexpr,
    EPILOGUE: tl.constexpr,  # the fused chain (kernels/epilogue.py; 0: none): vectors at e_ptr, residual at r_ptr
    STATS: tl.constexpr,  # bn_train's statistics pass (kernels/batch_stats.py): sums into r_ptr, no store
    PRODUCTS: tl.constexpr,  # 1: one dot at PRECISION; 3 (tf32x3) or 2 (stats_pass): TF32 products (_step)
    WINDOW: tl.constexpr,  # x_desc is the row-window view (window_view): K steps over kernel rows, not taps
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP: tl.constexpr,
    LLVM_OPT: tl.constexpr,  # unused in the body: keys the compile cache by kernels.llvm_opt's level
):
    TW: tl.constexpr = (OW + BLOCK_M - 1) // BLOCK_M  # row tiles an output row
    TILES_N: tl.constexpr = (C_OUT + BLOCK_N - 1) // BLOCK_N
    pid = tl.program_id(0)
    tiles_m = N * (OH * TW)
    per_group = GROUP * TILES_N
    first_m = (pid // per_group) * GROUP
    group_rows = tl.minimum(tiles_m - first_m, GROUP)
    pid_m = first_m + (pid % per_group) % group_rows
    pid_n = (pid % per_group) // group_rows
    row = pid_m // TW  # image · OH + output row
    img = row // OH
    oh = row % OH
    ow0 = (pid_m % TW) * BLOCK_M

    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    if WINDOW:  # a kernel row's KW·C values of an output column are contiguous: one box a kernel row and K block
        KWC: tl.constexpr = KW * C
        KW_BLOCKS: tl.constexpr = (KWC + BLOCK_K - 1) // BLOCK_K
        for t in range(KH * KW_BLOCKS):  # pipelined num_stages deep
            kh = t // KW_BLOCKS
            kb = (t % KW_BLOCKS) * BLOCK_K
            # zeros outside: the padding rows, columns past OW, values past KW·C (whose weights are the next row's)
            a = x_desc.load([img, oh + kh * DH - PH, ow0, kb]).reshape(BLOCK_M, BLOCK_K)
            acc = _step(acc, a, w_desc, pid_n * BLOCK_N, kh * KWC + kb, C_OUT, PRECISION, PRODUCTS)
    else:
        C_BLOCKS: tl.constexpr = (C + BLOCK_K - 1) // BLOCK_K
        for t in range(KH * KW * C_BLOCKS):  # pipelined num_stages deep
            tap = t // C_BLOCKS
            cb = (t % C_BLOCKS) * BLOCK_K
            # zeros outside the input: the padding, columns past W, channels past C (whose weights are the next tap's)
            a = x_desc.load([img, oh + (tap // KW) * DH - PH, ow0 + (tap % KW) * DW - PW, cb]).reshape(BLOCK_M, BLOCK_K)
            acc = _step(acc, a, w_desc, pid_n * BLOCK_N, tap * C + cb, C_OUT, PRECISION, PRODUCTS)

    ow = ow0 + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    n_mask = offs_n < C_OUT
    if HAS_BIAS:
        acc += tl.load(b_ptr + offs_n, mask=n_mask, other=0.0).to(tl.float32)[None, :]
    if STATS:
        add_batch_stats(acc, r_ptr, offs_n, n_mask, ow < OW, C_OUT, y_ptr.dtype.element_ty)
    else:
        if OUT_CL:  # channels_last: a position's channels are contiguous
            y_offs = (row.to(tl.int64) * OW + ow)[:, None] * C_OUT + offs_n[None, :]
        else:  # NCHW: a channel's positions are contiguous
            y_offs = (img.to(tl.int64) * (C_OUT * OH * OW) + oh * OW + ow)[:, None] + offs_n[None, :] * (OH * OW)
        y_mask = (ow < OW)[:, None] & n_mask[None, :]
        if EPILOGUE != 0:  # the residual is laid out as the output
            acc = apply_epilogue(acc, e_ptr, r_ptr, offs_n, n_mask, y_offs, y_mask, C_OUT, EPILOGUE,
                                 y_ptr.dtype.element_ty)
        tl.store(y_ptr + y_offs, acc, mask=y_mask)


@dataclass(frozen=True)
class LaunchPlan:
    """Everything a launch needs that depends only on shapes and configuration."""

    grid: tuple[int]
    out_shape: tuple[int, int, int, int]
    rounds: bool  # float32 at tf32: the input and the weight rounded to nearest TF32 before the kernel (not at tf32x3)
    constexprs: dict
    binary_key: tuple


def make_plan(g: ConvGeometry, has_bias: bool, meta: Meta, precision: str, out_cl: bool = True,
              element_bytes: int = 4, chain: tuple[str, ...] = ()) -> LaunchPlan:
    """The plan of a call whose tensors have `element_bytes` bytes an element, or UnsupportedProblem naming what
    this kernel does not take (ConfigError for the configuration)."""
    other = "; nhwc_igemm runs it"
    if element_bytes == 4 and precision not in PRECISIONS:
        raise UnsupportedProblem(f"nhwc_tma runs float32 at precision tf32 or tf32x3 only (its MMA takes operands "
                                 f"rounded before the kernel, or splits them), got {precision!r}{other}")
    if g.stride != (1, 1):
        raise UnsupportedProblem(f"nhwc_tma takes stride 1 only (a tap's A tile is then one box of the input), got "
                                 f"stride {list(g.stride)}{other}")
    if (g.c * element_bytes) % 16:
        raise UnsupportedProblem(f"nhwc_tma takes input channels whose rows are 16-byte aligned (TMA), a multiple of "
                                 f"{16 // element_bytes}; got {g.c}{other}")
    SPACE.check(meta)
    if g.n * g.c_out * g.oh * g.ow >= 2**31:  # the grid, fewer programs than elements, then fits its axis too
        raise UnsupportedProblem(f"the output has {g.n * g.c_out * g.oh * g.ow} elements; int32 indexing allows "
                                 f"< 2**31{other}")
    window = window_fits(g.c, g.kw, g.padding[1], g.dilation[1], meta.BLOCK_K)
    k_steps = steps(g.c, g.kh, g.kw, meta.BLOCK_K, window)
    cx = dict(C=g.c, C_OUT=g.c_out, OH=g.oh, OW=g.ow, KH=g.kh, KW=g.kw, PH=g.padding[0], PW=g.padding[1],
              DH=g.dilation[0], DW=g.dilation[1], HAS_BIAS=has_bias,
              PRECISION=dot_precision(precision) if element_bytes == 4 else "tf32", OUT_CL=out_cl,
              EPILOGUE=code(chain), STATS=False, PRODUCTS=3 if element_bytes == 4 and precision == "tf32x3" else 1,
              WINDOW=window, BLOCK_M=meta.BLOCK_M, BLOCK_N=meta.BLOCK_N, BLOCK_K=meta.BLOCK_K, GROUP=GROUP_M,
              num_warps=meta.num_warps, num_stages=safe_stages(meta.num_stages, k_steps))
    rounds = element_bytes == 4 and precision == "tf32"
    return LaunchPlan(_grid(cx, g.n), (g.n, g.c_out, g.oh, g.ow), rounds, cx, tuple(sorted(cx.items())))


def window_fits(c: int, kw: int, pw: int, dw: int, block_k: int) -> bool:
    """Whether the K loop runs over the row-window view (window_view): no column padding or dilation (a kernel row's
    KW·C values of an output column are then contiguous in the NHWC input), and fewer K steps than the loop over taps
    (channels fewer than BLOCK_K: KernelBench level 2 #73's 8 channels take 3 steps of 32 there, 9 of 16 tap by tap)."""
    return pw == 0 and dw == 1 and triton.cdiv(kw * c, block_k) < kw * triton.cdiv(c, block_k)


def steps(c: int, kh: int, kw: int, block_k: int, window: bool) -> int:
    """The K loop's steps: kernel rows × blocks of KW·C values over the window view, else taps × channel blocks."""
    return kh * triton.cdiv(kw * c, block_k) if window else kh * kw * triton.cdiv(c, block_k)


def window_view(nhwc: torch.Tensor, ow: int, kw: int) -> torch.Tensor:
    """The NHWC input as [N, H, OW, KW·C]: element (n, h, j, k) is input column j + k // C, channel k % C, so one
    box [1, 1, BLOCK_M, BLOCK_K] is a kernel row's im2col tile of BLOCK_M output columns (rows overlap: stride C)."""
    n, h, w, c = nhwc.shape
    return nhwc.as_strided((n, h, ow, kw * c), (h * w * c, w * c, c, 1), nhwc.storage_offset())


# bn_train's statistics at tf32x3 take two TF32 products, not three (stats_pass), over this many output positions or
# more (KernelBench level 2 #73: 2.03 million): the input's rounding errors average out as 1/√count. On random shapes of
# 66k-260k positions the chain's worst error from float64 was 1.06e-4 with two, 8.8e-5 with three (cuDNN's 2.8e-5)
TWO_PRODUCTS_MIN_COUNT = 1 << 20


def stats_pass(plan: LaunchPlan, count: int) -> LaunchPlan:
    """The plan of bn_train's statistics pass (kernels/batch_stats.py) before `plan`, over `count` output positions
    a channel: the same tiles, no epilogue, sums instead of a store. At tf32x3, from TWO_PRODUCTS_MIN_COUNT positions
    up, two TF32 products instead of three (_step): the input rounded to nearest, times the weight's TF32 rounding
    and its remainder. The input's rounding is unbiased and averages out over the batch; a rounded weight's error is
    the same at every position and would not (KernelBench level 2 #73 in float64 on the CPU, 32 images: the output
    1.4e-5 from the exact chain's, 0.04 of allclose(1e-4); with the weight rounded too 1.9e-3, 16x allclose, the mean
    off by 8e-4 σ: the input's mean is 0.5)."""
    products = plan.constexprs["PRODUCTS"]
    products = 2 if products == 3 and count >= TWO_PRODUCTS_MIN_COUNT else products
    cx = {**plan.constexprs, "EPILOGUE": 0, "STATS": True, "PRODUCTS": products}
    return LaunchPlan(plan.grid, plan.out_shape, plan.rounds, cx, tuple(sorted(cx.items())))


def _grid(cx: dict, n: int) -> tuple[int]:
    """One program a tile: n images × OH rows × the row's column tiles × the channel tiles."""
    return (n * cx["OH"] * triton.cdiv(cx["OW"], cx["BLOCK_M"]) * triton.cdiv(cx["C_OUT"], cx["BLOCK_N"]),)


def kernel_input(x: torch.Tensor, plan: LaunchPlan) -> torch.Tensor:
    """The input as the kernel reads it: channels_last-contiguous, rounded to nearest TF32 in float32 (in the copy an
    NCHW input needs, or by a pass of its own: layout.to_channels_last), and 16-byte aligned (a TMA descriptor's
    base: an input that is not is copied)."""
    x = to_channels_last(x, round_to_nearest_tf32=plan.rounds)
    return x if x.data_ptr() % 16 == 0 else x.clone(memory_format=torch.channels_last)


def descriptors(x: torch.Tensor, wp: torch.Tensor, cx: dict) -> tuple[Any, Any]:
    """TMA descriptors of the channels_last input as [N, H, W, C] (a box: one row's BLOCK_M columns), or as its row
    window where the plan takes it, and of the packed weight (weight_descriptor)."""
    from triton.tools.tensor_descriptor import TensorDescriptor

    nhwc = x.permute(0, 2, 3, 1)
    nhwc = window_view(nhwc, cx["OW"], cx["KW"]) if cx["WINDOW"] else nhwc
    return TensorDescriptor.from_tensor(nhwc, [1, 1, cx["BLOCK_M"], cx["BLOCK_K"]]), weight_descriptor(wp, cx)


def weight_operand(weight: torch.Tensor, plan: LaunchPlan, cached: bool = True) -> torch.Tensor:
    """The weight as the plan's kernel reads it: split_weight's halves for TF32 products, else packed (and rounded
    where the plan rounds); `cached`: kept until the weight changes (nhwc_tiles)."""
    if plan.constexprs["PRODUCTS"] > 1:
        return split_weight(weight) if cached else pack_split(weight)
    return packed_weight(weight, plan.rounds) if cached else pack_weight(weight, plan.rounds)


def weight_descriptor(wp: torch.Tensor, cx: dict) -> Any:
    """The packed weight's TMA descriptor as [rows, K] (rows: C_out, or 2·C_out for split_weight)."""
    from triton.tools.tensor_descriptor import TensorDescriptor

    return TensorDescriptor.from_tensor(wp.view(wp.shape[0], -1), [cx["BLOCK_N"], cx["BLOCK_K"]])


_binaries = BoundLaunches("nhwc_tma", lambda: _conv2d_nhwc_tma_kernel, 7)


def run(plan: LaunchPlan, x: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor],
        out: torch.Tensor, epilogue: Epilogue = NO_EPILOGUE) -> tuple[Any, str]:
    """Launch a plan on tensors that match it (`x` channels_last-contiguous and rounded as kernel_input makes it,
    `out` in the plan's layout); a chain that starts with bn_train runs the statistics pass first. Returns the compiled
    kernel (the pass that writes `out`) and the LLVM level it was compiled at."""
    wp = weight_operand(weight, plan)
    b = bias if bias is not None else out
    xd, wd = descriptors(x, wp, plan.constexprs)
    n = x.shape[0]
    if epilogue.chain[:1] == ("bn_train",):
        epilogue = batch_stats.normalized(epilogue, statistics(plan, x, xd, weight, bias, out),
                                          n * out.shape[2] * out.shape[3])
    e = epilogue.vectors if epilogue.vectors is not None else out
    r = epilogue.residual_as(plan.constexprs["OUT_CL"]) if epilogue.residual is not None else out
    return _one_pass(plan, xd, wd, b, out, e, r, n, x, wp,
                     lambda lvl: _right_at(lvl, plan, x, weight, bias, out, epilogue))


def statistics(plan: LaunchPlan, x: torch.Tensor, xd: Any, weight: torch.Tensor, bias: Optional[torch.Tensor],
               out: torch.Tensor) -> torch.Tensor:
    """bn_train's sums over the batch (batch_stats.new_sums' buffer) from the statistics pass before `plan`; `xd`: the
    input's descriptor (descriptors)."""
    n = x.shape[0]
    first = stats_pass(plan, n * out.shape[2] * out.shape[3])
    wp = weight_operand(weight, first)
    sums = batch_stats.new_sums(out.shape[1], x.device)
    _one_pass(first, xd, weight_descriptor(wp, first.constexprs), bias if bias is not None else out, out, out, sums,
              n, x, wp, lambda lvl: _stats_right_at(lvl, first, x, weight, bias, out))
    return sums


def _one_pass(plan: LaunchPlan, xd: Any, wd: Any, b: torch.Tensor, out: torch.Tensor, e: torch.Tensor,
              r: torch.Tensor, n: int, x: torch.Tensor, wp: torch.Tensor, right_at: Any) -> tuple[Any, str]:
    if x.device.type != "cuda":  # the interpreter compiles nothing
        return _launch(plan, xd, wd, b, out, e, r, n, "none"), "none"
    return _binaries.run(alignment_key(plan.binary_key, x.device, x, wp, b, out, e, r), plan.grid,
                         (xd, wd, b, out, e, r, n), plan.constexprs, right_at,
                         lambda lvl: _launch(plan, xd, wd, b, out, e, r, n, lvl))


def _launch(plan: LaunchPlan, xd: Any, wd: Any, b: torch.Tensor, out: torch.Tensor, e: torch.Tensor,
            r: torch.Tensor, n: int, level: str) -> Any:
    return _conv2d_nhwc_tma_kernel[_grid(plan.constexprs, n)](xd, wd, b, out, e, r, n, **plan.constexprs,
                                                               LLVM_OPT=level)


def _one_image(plan: LaunchPlan, x: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor],
               out: torch.Tensor) -> Any:
    c, h, w = x.shape[1:]
    t = one_image(x, weight, bias, out, (c, h, w), True, plan.out_shape[1:], plan.constexprs["OUT_CL"], 20261122)
    if plan.rounds:  # as the real input is: the kernel does not round it
        t.x.copy_(round_to_tf32_even(t.x))
    return t


def _right_at(level: str, plan: LaunchPlan, x: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor],
              out: torch.Tensor, epilogue: Epilogue = NO_EPILOGUE) -> bool:
    """Compile the binary at `level` and run it on one image (N is not specialised) against float64, with its
    epilogue (kernels/llvm_opt.py: why): bn_train's rows there are random, as any bn's."""
    cx = plan.constexprs
    t = _one_image(plan, x, weight, bias, out)
    ep = check_epilogue(epilogue, t.out)
    if ep.chain[:1] == ("bn_train",):  # the second pass: a bn with rows as given
        ep = Epilogue(("bn",) + ep.chain[1:], ep.vectors, ep.residual)
    xd, wd = descriptors(t.x, weight_operand(t.weight, plan, cached=False), cx)
    with llvm_opt.compiling_at(level):
        _launch(plan, xd, wd, t.bias if t.bias is not None else t.out, t.out,
                ep.vectors if ep.vectors is not None else t.out, ep.residual if ep.residual is not None else t.out,
                1, level)
    return agrees(t.out, t.x, t.weight, t.bias, (1, 1), (cx["PH"], cx["PW"]), (cx["DH"], cx["DW"]), cx["PRECISION"], ep)


def _stats_right_at(level: str, plan: LaunchPlan, x: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor],
                    out: torch.Tensor) -> bool:
    """The statistics pass's binary compiled at `level`, its sums on one image against float64's."""
    cx = plan.constexprs
    t = _one_image(plan, x, weight, bias, out)
    sums = batch_stats.new_sums(out.shape[1], x.device)
    xd, wd = descriptors(t.x, weight_operand(t.weight, plan, cached=False), cx)
    with llvm_opt.compiling_at(level):
        _launch(plan, xd, wd, t.bias if t.bias is not None else t.out, t.out, t.out, sums, 1, level)
    return sums_agree(sums, t.x, t.weight, t.bias, (1, 1), (cx["PH"], cx["PW"]), (cx["DH"], cx["DW"]),
                      "tf32" if cx["PRODUCTS"] == 2 else cx["PRECISION"], t.out.dtype)  # 2: the input's rounding


def _plan(x: torch.Tensor, g: ConvGeometry, has_bias: bool, meta: Meta, precision: str, out_cl: bool,
          chain: tuple[str, ...] = ()) -> LaunchPlan:
    return make_plan(g, has_bias, meta, precision, out_cl, x.element_size(), chain)


HOST = Host(_plan, kernel_input, run, channels_last=True, dtypes=DTYPES, epilogues=EPILOGUE_OPS)
launch, prepared = HOST.launch, HOST.prepared


def default_meta(out_channels: int, stride_w: int, width: int, precision: str = "tf32") -> Meta:
    """128 columns by 128 channels, K steps of 32 channels, 4 warps, 3 stages: the best of its sweeps on KernelBench
    level 2 #1 in float32 on the H200 (M128-N128-K32-w4-s3 1.269 ms; 4 stages 1.453, 8 warps 1.569, BLOCK_M 256 2.29 or
    slower); a 64-column tile where the output rows are no wider, 64 channels where there are no more."""
    return Meta(BLOCK_M=64 if width <= 64 else 128, BLOCK_N=128 if out_channels > 64 else 64, BLOCK_K=32,
                num_warps=4, num_stages=3)


# identity (kernels/identity.py): bump VERSION on a deliberate change of the host's numerics
VERSION = 1
SOURCE = KernelSource(VERSION, (_conv2d_nhwc_tma_kernel, _step, round_tf32_even_bits, round_tf32_even_ptx,
                                _nchw_to_nhwc_kernel, _round_tf32_kernel))
# before bn_train's statistics pass, the row-window loop and tf32x3's own products: a binary at tf32 or in 16 bits
# without STATS, of a shape the window does not take, computes as it did (the level 2 #1 pins' among them: 64 channels)
PREVIOUS_SOURCE_HASHES = ("37662fa1aa17",)


from convtune.kernels.variants.nhwc_tma.cases import draw_case  # noqa: E402
from convtune.kernels.variants.nhwc_tma.export import render_kernelbench  # noqa: E402

register(KernelVariant(
    name="nhwc_tma", launch=launch, prepared=prepared, library=HOST, default_meta=default_meta,
    source=SOURCE, previous_hashes=PREVIOUS_SOURCE_HASHES, tf32_ties=TF32_TIES,
    entry_points=("_conv2d_nhwc_tma_kernel",),
    restricted_to=RESTRICTED_TO, draw_case=draw_case, precisions=PRECISIONS, space=SPACE,
    compute_capability=COMPUTE_CAPABILITY, export=render_kernelbench, refuses=plan_refuses(make_plan)))
