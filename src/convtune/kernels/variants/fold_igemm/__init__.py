"""`fold_igemm`: a strided convolution over few channels as a stride-1 GEMM fed by TMA.

A stride-(SH, SW) convolution is, after a space-to-depth of its padded input (`fold`: channel (c, r, s) of folded
position (hf, wf) is x[c, SH·hf + r - PH, SW·wf + s - PW], zero outside), a stride-1 convolution without padding
over CF = C·SH·SW channels (padded to a multiple of 4, zeros) with ceil(KH/SH) × ceil(KW/SW) taps, the weight
zero-padded and folded the same way. L1 #50's 11×11 stride-4 convolution over 3 channels becomes a 3×3 one over 48
(K 432 instead of 363; implicit_gemm pads it to 528 for its 16-byte gathers).

The fold writes NHWC (and rounds to nearest TF32 on the way for `tf32`: free in a copy, and the MMA then reads A
straight from shared memory). In it, output position q = oh·WF + ow of one image reads for kernel row a the WF-wide
rows q + a·WF, each B taps × CF channels = B·CF contiguous floats: a view [positions, B·CF] with row stride CF (its
rows overlap, which a TMA descriptor allows). So A and the weight both come through TMA, the K loop has neither
address arithmetic nor masks, and a tile is BLOCK_M consecutive q of one image (q past OW in each row, WF - OW of
every WF, are computed and not stored). Where the output channels fill three quarters of one BLOCK_N tile (L1 #50's
96 of 128), the tile is split into BLOCK_N/2 + BLOCK_N/4 columns, two MMAs sharing each A tile, so that no MMA runs
on zero weights.

On the H200, L1 #50, fold and convolution in one call: 0.398 ms at M128-N64+32-K32-w4-s4 (the convolution 0.32, the
tiled fold 0.080), where implicit_gemm at its pin takes 0.526 ms and cuDNN 2.10. The alternatives measured slower: the
masked-load form of the same K loop 0.427 ms; a 128-wide N tile instead of the split 0.50; persistent grids 0.49-1.06;
the batch in chunks with the folds on a second stream 0.42-0.50; BLOCK_K 16 0.43-0.45. The convolution is
latency-bound at 8 warps an SM (tensor pipe 50 %, NCU), and Triton's automatic warp specialisation gives wrong
results on this K loop: `fused_gluon` is the Hopper kernel that goes further (docs/PERFORMANCE.md).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Optional

import torch
import triton
import triton.language as tl

from convtune.errors import UnsupportedProblem
from convtune.kernels import llvm_opt
from convtune.kernels.base import KernelVariant, plan_refuses, register
from convtune.kernels.host import BoundLaunches, Host, alignment_key
from convtune.kernels.identity import KernelSource
from convtune.kernels.weight_pack import fold_weight, folded_channels
from convtune.kernels.conv_args import ConvGeometry
from convtune.kernels.meta import Meta
from convtune.kernels.runner import WeightCache, bound_runner
from convtune.kernels.precision import dot_precision, round_tf32, round_to_tf32, rounds_operands
from convtune.kernels.epilogue import NO_EPILOGUE, Epilogue, apply_epilogue, code
from convtune.kernels.selfcheck import agrees, aligned_nan, aligned_random, check_epilogue
from convtune.kernels.variants.fold_igemm.geometry import FOLD_TILE, fold_tiling, folded_rows, split_columns
from convtune.problem import POINTWISE_OPS

FOLD_BLOCK = 1024  # folded elements per program of the elementwise fold (strides not a power of two; not tuned)

# How `tf32` breaks rounding ties: away from zero, as cuDNN does on the layers this kernel serves (L1 #50 and the
# ResNet-50 stem: kernels/precision.py)
TF32_TIES = "away"
DTYPES = ("float32", "bfloat16", "float16")


@triton.jit
def _fold_kernel(x_ptr, y_ptr,
                 C: tl.constexpr, H: tl.constexpr, W: tl.constexpr, IN_CL: tl.constexpr, SH: tl.constexpr,
                 SW: tl.constexpr, PH: tl.constexpr, PW: tl.constexpr, HF: tl.constexpr, WF: tl.constexpr,
                 CF: tl.constexpr, ROUND: tl.constexpr, BLOCK: tl.constexpr):
    """x (NCHW or channels_last: IN_CL) → y [N, HF, WF, CF] contiguous: channel (c·SH + r)·SW + s of (hf, wf) is
    x[c, SH·hf + r - PH, SW·wf + s - PW], zero outside the input and for the channels past C·SH·SW. A program
    folds BLOCK elements of one image (program_id(1)): every index inside an image is int32 and every divisor a
    constant (an int64 index with runtime strides ran L1 #50's fold at 0.194 ms against 0.082 ms this way)."""
    img = tl.program_id(1).to(tl.int64)
    o = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    inside = o < HF * WF * CF
    ch = o % CF
    wf = (o // CF) % WF
    hf = o // (CF * WF)
    s = ch % SW
    r = (ch // SW) % SH
    c = ch // (SW * SH)
    ih = hf * SH + r - PH
    iw = wf * SW + s - PW
    keep = inside & (c < C) & (ih >= 0) & (ih < H) & (iw >= 0) & (iw < W)
    if IN_CL:
        at = (ih * W + iw) * C + c
    else:
        at = (c * H + ih) * W + iw
    v = tl.load(x_ptr + img * (C * H * W) + at, mask=keep, other=0.0)
    if ROUND:  # to nearest TF32 as cuDNN does; the weights were rounded when packed
        v = round_tf32(v)
    tl.store(y_ptr + img * (HF * WF * CF) + o, v, mask=inside)


@triton.jit
def _fold_rows_kernel(x_ptr, y_ptr,
                      C: tl.constexpr, H: tl.constexpr, W: tl.constexpr, IN_CL: tl.constexpr, SH: tl.constexpr,
                      SW: tl.constexpr, PH: tl.constexpr, PW: tl.constexpr, HF: tl.constexpr, WF: tl.constexpr,
                      CF: tl.constexpr, ROUND: tl.constexpr, CP: tl.constexpr, WB: tl.constexpr):
    """_fold_kernel's result, a tile at a time: program (i, image) folds WB positions of folded row hf. It loads the
    input it needs as that lies in memory (NCHW: [CP·SH rows, WB·SW columns]; channels_last: [SH rows, WB·SW
    columns, CP channels]), contiguous along the input's fastest axis, and permutes it in registers to [WB, CP·SH·SW]
    before storing. CP: enough channels, a power of two, that CP·SH·SW ≥ CF (the channels past C are loaded as zeros);
    SH and SW must be powers of two."""
    NWB: tl.constexpr = (WF + WB - 1) // WB
    hf = tl.program_id(0) // NWB
    wf0 = (tl.program_id(0) % NWB) * WB
    img = tl.program_id(1).to(tl.int64)
    x_img = x_ptr + img * (C * H * W)
    if IN_CL:
        r = tl.arange(0, SH)[:, None, None]
        col = tl.arange(0, WB * SW)[None, :, None]
        c = tl.arange(0, CP)[None, None, :]
        ih = hf * SH + r - PH
        iw = wf0 * SW + col - PW
        keep = (ih >= 0) & (ih < H) & (iw >= 0) & (iw < W) & (wf0 + col // SW < WF) & (c < C)
        v = tl.load(x_img + (ih * W + iw) * C + c, mask=keep, other=0.0)
        v = tl.permute(tl.reshape(v, (SH, WB, SW, CP)), (1, 3, 0, 2))  # (wf, c, r, s)
    else:
        row = tl.arange(0, CP * SH)[:, None]  # (c, r)
        col = tl.arange(0, WB * SW)[None, :]  # (wf, s)
        c = row // SH
        ih = hf * SH + row % SH - PH
        iw = wf0 * SW + col - PW
        keep = (c < C) & (ih >= 0) & (ih < H) & (iw >= 0) & (iw < W) & (wf0 + col // SW < WF)
        v = tl.load(x_img + (c * H + ih) * W + iw, mask=keep, other=0.0)
        v = tl.permute(tl.reshape(v, (CP * SH, WB, SW)), (1, 0, 2))  # (wf, (c, r), s)
    v = tl.reshape(v, (WB, CP * SH * SW))
    if ROUND:
        v = round_tf32(v)
    wf = wf0 + tl.arange(0, WB)[:, None]
    ch = tl.arange(0, CP * SH * SW)[None, :]
    tl.store(y_ptr + img * (HF * WF * CF) + (hf * WF + wf) * CF + ch, v, mask=(wf < WF) & (ch < CF))


@triton.jit
def _conv2d_fold_kernel(
    a_desc, w_desc, w2_desc, b_ptr, y_ptr, e_ptr, r_ptr,  # a_desc: the folded input as [positions, KWF·CF], row stride CF
    HF: tl.constexpr, WF: tl.constexpr, OH: tl.constexpr, OW: tl.constexpr, C_OUT: tl.constexpr,
    KHF: tl.constexpr, ROW_PAD: tl.constexpr, HAS_BIAS: tl.constexpr, PRECISION: tl.constexpr,
    OUT_CL: tl.constexpr, SPLIT: tl.constexpr,
    EPILOGUE: tl.constexpr,  # the fused chain (kernels/epilogue.py; 0: none): vectors at e_ptr, residual at r_ptr
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    LLVM_OPT: tl.constexpr,  # unused in the body: keys the compile cache by kernels.llvm_opt's level
):
    # The columns a program computes: one BLOCK_N tile, or (SPLIT) BLOCK_N/2 + BLOCK_N/4 of them, each with its
    # own MMA on the same A tile
    N1: tl.constexpr = BLOCK_N // 2 if SPLIT else BLOCK_N
    N2: tl.constexpr = BLOCK_N // 4 if SPLIT else 16  # 16: an unused accumulator's smallest shape
    NT: tl.constexpr = N1 + N2 if SPLIT else BLOCK_N
    TILES_N: tl.constexpr = (C_OUT + NT - 1) // NT
    TILES_PER_IMG: tl.constexpr = (OH * WF + BLOCK_M - 1) // BLOCK_M
    CHUNKS: tl.constexpr = ROW_PAD // BLOCK_K
    OHW: tl.constexpr = OH * OW
    pid = tl.program_id(0)
    pid_n = pid % TILES_N  # the column tiles of one row tile run side by side, sharing its A tiles in L2
    tile = pid // TILES_N
    img = tile // TILES_PER_IMG
    q0 = (tile % TILES_PER_IMG) * BLOCK_M
    r0 = img * (HF * WF) + q0
    n0 = pid_n * NT

    acc = tl.zeros((BLOCK_M, N1), dtype=tl.float32)
    acc2 = tl.zeros((BLOCK_M, N2), dtype=tl.float32)
    for t in range(0, KHF * CHUNKS):  # pipelined num_stages deep
        a = a_desc.load([r0 + (t // CHUNKS) * WF, (t % CHUNKS) * BLOCK_K])
        k = (t // CHUNKS) * ROW_PAD + (t % CHUNKS) * BLOCK_K
        acc = tl.dot(a, w_desc.load([n0, k]).T, acc, input_precision=PRECISION)
        if SPLIT:
            acc2 = tl.dot(a, w2_desc.load([n0 + N1, k]).T, acc2, input_precision=PRECISION)

    q = q0 + tl.arange(0, BLOCK_M)
    p = (q // WF) * OW + q % WF  # the output position of q, where q % WF < OW
    valid = (q < OH * WF) & (q % WF < OW)
    y_img = y_ptr + img.to(tl.int64) * (C_OUT * OHW)
    r_img = r_ptr + img.to(tl.int64) * (C_OUT * OHW)  # the residual is laid out as the output
    _store(acc, b_ptr, y_img, e_ptr, r_img, p, valid, n0 + tl.arange(0, N1), C_OUT, OHW, HAS_BIAS, OUT_CL, EPILOGUE)
    if SPLIT:
        _store(acc2, b_ptr, y_img, e_ptr, r_img, p, valid, n0 + N1 + tl.arange(0, N2), C_OUT, OHW, HAS_BIAS, OUT_CL,
               EPILOGUE)


@triton.jit
def _store(acc, b_ptr, y_img, e_ptr, r_img, p, valid, offs_n, C_OUT: tl.constexpr, OHW: tl.constexpr,
           HAS_BIAS: tl.constexpr, OUT_CL: tl.constexpr, EPILOGUE: tl.constexpr):
    n_mask = offs_n < C_OUT
    if HAS_BIAS:
        acc += tl.load(b_ptr + offs_n, mask=n_mask, other=0.0)[None, :]
    if OUT_CL:  # channels_last: a position's channels are contiguous
        y_offs = p[:, None] * C_OUT + offs_n[None, :]
    else:  # NCHW: a channel's positions are contiguous
        y_offs = p[:, None] + offs_n[None, :] * OHW
    y_mask = valid[:, None] & n_mask[None, :]
    if EPILOGUE != 0:
        acc = apply_epilogue(acc, e_ptr, r_img, offs_n, n_mask, y_offs, y_mask, C_OUT, EPILOGUE, y_img.dtype.element_ty)
    tl.store(y_img + y_offs, acc, mask=y_mask)


@dataclass(frozen=True)
class LaunchPlan:
    """Everything a launch needs that depends only on shapes and configuration."""

    grid: tuple[int]
    out_shape: tuple[int, int, int, int]
    folded_shape: tuple[int, int, int, int]  # [N, HF, WF, CF]
    rows: int  # the A descriptor's rows (folded_rows)
    taps: tuple[int, int]  # the folded kernel, KHF × KWF
    stride: tuple[int, int]
    row_pad: int  # a folded kernel row's KWF·CF floats, padded to a multiple of BLOCK_K (the weight zero there)
    round_tf32: bool  # the fold rounds the input to nearest TF32, the packing the weight
    out_cl: bool
    fold_constexprs: dict
    constexprs: dict
    binary_key: tuple


def make_plan(g: ConvGeometry, has_bias: bool, meta: Meta, precision: str, out_cl: bool = False,
              element_bytes: int = 4, chain: tuple[str, ...] = ()) -> LaunchPlan:
    """The plan for a call whose tensors have `element_bytes` bytes an element (4, or 2 for 16-bit ones), fusing the
    epilogue `chain` (kernels/epilogue.py)."""
    if g.dilation != (1, 1):
        raise UnsupportedProblem(f"fold_igemm takes dilation 1 only, got {list(g.dilation)}")
    sh, sw = g.stride
    khf, kwf = -(-g.kh // sh), -(-g.kw // sw)
    hf, wf = g.oh + khf - 1, g.ow + kwf - 1
    cf = folded_channels(g.c, g.stride, element_bytes)
    if g.n * hf * wf >= 2**31 or g.n * g.oh * g.ow * g.c_out >= 2**31 or hf * wf * cf >= 2**31:
        raise UnsupportedProblem(f"fold_igemm: {g.n * hf * wf} folded positions, {hf * wf * cf} folded elements an "
                                 f"image and {g.n * g.oh * g.ow * g.c_out} output elements; int32 indexing (and TMA's "
                                 "coordinates) allow < 2**31")
    if g.n > 65535:  # the fold's grid has one column per image
        raise UnsupportedProblem(f"fold_igemm folds at most 65535 images a call, got {g.n}")
    row_pad = -(-kwf * cf // meta.BLOCK_K) * meta.BLOCK_K
    rounds = rounds_operands(precision)
    fold_cx = dict(C=g.c, H=g.h, W=g.w, SH=sh, SW=sw, PH=g.padding[0], PW=g.padding[1], HF=hf, WF=wf, CF=cf,
                   ROUND=rounds)
    tiling = fold_tiling(cf, g.stride, wf)
    fold_cx.update(dict(zip(("CP", "WB"), tiling)) if tiling else {"BLOCK": FOLD_BLOCK})
    split = split_columns(g.c_out, meta.BLOCK_N)
    cx = dict(HF=hf, WF=wf, OH=g.oh, OW=g.ow, C_OUT=g.c_out, KHF=khf, ROW_PAD=row_pad, HAS_BIAS=has_bias,
              PRECISION=dot_precision(precision), OUT_CL=out_cl, SPLIT=split, EPILOGUE=code(chain), BLOCK_M=meta.BLOCK_M,
              BLOCK_N=meta.BLOCK_N, BLOCK_K=meta.BLOCK_K, num_warps=meta.num_warps, num_stages=meta.num_stages)
    columns = meta.BLOCK_N * 3 // 4 if split else meta.BLOCK_N
    grid = (g.n * triton.cdiv(g.oh * wf, meta.BLOCK_M) * triton.cdiv(g.c_out, columns),)
    return LaunchPlan(grid, (g.n, g.c_out, g.oh, g.ow), (g.n, hf, wf, cf), folded_rows(g.n * hf * wf), (khf, kwf),
                      g.stride, row_pad, rounds, out_cl, fold_cx, cx, tuple(sorted(cx.items())))


# the fold's launches, bound as the conv's are (runner.bound_runner); the fold is Triton's to compile (not an entry
# point llvm_opt checks: a copy, checked by every result it feeds)
_fold_bound: dict[tuple, Any] = {}


def fold(x: torch.Tensor, plan: LaunchPlan) -> torch.Tensor:
    """The plan's folded input [N, HF, WF, CF], contiguous, from `x` NCHW or channels_last (any other layout is
    made NCHW first), in one pass that rounds for tf32, at the start of a buffer of (rows + KWF - 1)·CF floats
    (folded_rows: the tail is read for outputs not stored)."""
    in_cl = not x.is_contiguous() and x.is_contiguous(memory_format=torch.channels_last)
    x = x if in_cl else x.contiguous()
    n, hf, wf, cf = plan.folded_shape
    y = torch.empty((plan.rows + plan.taps[1] - 1) * cf, device=x.device, dtype=x.dtype)
    cx = plan.fold_constexprs
    if "WB" in cx:  # the tiled fold (fold_tiling)
        kernel, grid, warps = _fold_rows_kernel, (hf * triton.cdiv(wf, cx["WB"]), n), 8
    else:
        kernel, grid, warps = _fold_kernel, (triton.cdiv(hf * wf * cf, FOLD_BLOCK), n), 4
    key = ("fold", grid, tuple(sorted(cx.items())), in_cl, x.get_device(), x.dtype, x.data_ptr() & 15)
    bound = _fold_bound.get(key)
    if bound is not None:
        bound(x, y)
        return y
    compiled = kernel[grid](x, y, IN_CL=in_cl, **cx, num_warps=warps)
    if x.is_cuda:
        bound = bound_runner(compiled, grid, kernel, 2, {"IN_CL": in_cl, **cx})
        if bound is not None:
            _fold_bound[key] = bound
    return y


_packed = WeightCache()  # the folded, packed weight, until the weight changes


def pack_weight(weight: torch.Tensor, plan: LaunchPlan) -> torch.Tensor:
    """The plan's folded weight (fold_weight), rounded to nearest TF32 where the plan's input is."""
    w = fold_weight(weight, plan.stride, plan.taps, plan.folded_shape[3], plan.row_pad)
    return round_to_tf32(w) if plan.round_tf32 else w


def packed_weight(weight: torch.Tensor, plan: LaunchPlan) -> torch.Tensor:
    return _packed.get(weight, (plan.stride, plan.taps, plan.folded_shape[3], plan.row_pad, plan.round_tf32),
                       lambda w: pack_weight(w, plan))


def _input_descriptor(plan: LaunchPlan, xf: torch.Tensor) -> Any:
    """The folded input's TMA descriptor: overlapping rows [positions, KWF·CF] with row stride CF."""
    from triton.tools.tensor_descriptor import TensorDescriptor

    cx, cf, kwf = plan.constexprs, plan.folded_shape[3], plan.taps[1]
    return TensorDescriptor(xf, [plan.rows, kwf * cf], [cf, 1], [cx["BLOCK_M"], cx["BLOCK_K"]])  # xf: fold's buffer


def _weight_descriptors(plan: LaunchPlan, wp: torch.Tensor) -> tuple[Any, Any]:
    """The packed weight's TMA descriptors: [C_out, K] in column tiles of BLOCK_N (or BLOCK_N/2 and /4: SPLIT)."""
    from triton.tools.tensor_descriptor import TensorDescriptor

    n, k = plan.constexprs["BLOCK_N"], plan.constexprs["BLOCK_K"]
    if plan.constexprs["SPLIT"]:
        return TensorDescriptor.from_tensor(wp, [n // 2, k]), TensorDescriptor.from_tensor(wp, [n // 4, k])
    w = TensorDescriptor.from_tensor(wp, [n, k])
    return w, w


# the packed weight's descriptors, kept with it: TensorDescriptor.from_tensor took 3.45 us a call on the H200
_described = WeightCache()


def weight_descriptors(weight: torch.Tensor, plan: LaunchPlan) -> tuple[Any, Any]:
    return _described.get(weight, (plan.stride, plan.taps, plan.folded_shape[3], plan.row_pad, plan.round_tf32,
                                   plan.binary_key), lambda w: _weight_descriptors(plan, packed_weight(w, plan)))


def _launch(plan: LaunchPlan, xf: torch.Tensor, wp: torch.Tensor, b: torch.Tensor, out: torch.Tensor, e: torch.Tensor,
            r: torch.Tensor, level: str) -> Any:
    return _conv2d_fold_kernel[plan.grid](_input_descriptor(plan, xf), *_weight_descriptors(plan, wp), b, out, e, r,
                                          **plan.constexprs, LLVM_OPT=level)


_binaries = BoundLaunches("fold_igemm", lambda: _conv2d_fold_kernel, 7)


def run(plan: LaunchPlan, x: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor],
        out: torch.Tensor, epilogue: Epilogue = NO_EPILOGUE) -> tuple[Any, str]:
    """Fold `x` (any layout; the caller has checked it) and launch the plan, writing `out` (in the plan's layout) with
    its epilogue. Returns the compiled kernel and the LLVM level it was compiled at (kernels/llvm_opt)."""
    xf = fold(x, plan)
    wp = packed_weight(weight, plan)
    b = bias if bias is not None else wp
    e = epilogue.vectors if epilogue.vectors is not None else wp  # not read without a chain that uses them
    r = epilogue.residual_as(plan.out_cl) if epilogue.residual is not None else wp
    if x.device.type != "cuda":  # the interpreter compiles nothing
        return _launch(plan, xf, wp, b, out, e, r, "none"), "none"
    # the folded input and packed weight are fresh tensors, always aligned: the others' alignment picks the binary
    return _binaries.run(alignment_key(plan.binary_key, x.device, b, out, e, r), plan.grid,
                         (_input_descriptor(plan, xf), *weight_descriptors(weight, plan), b, out, e, r),
                         plan.constexprs,
                         lambda lvl: _right_at(lvl, plan, weight, bias, out, epilogue),
                         lambda lvl: _launch(plan, xf, wp, b, out, e, r, lvl))


def _right_at(level: str, plan: LaunchPlan, weight: torch.Tensor, bias: Optional[torch.Tensor],
              out: torch.Tensor, epilogue: Epilogue = NO_EPILOGUE) -> bool:
    """Compile the binary at `level` and run it on one random image (the number of tiles is not specialised: the
    binary is the same for any batch) against float64 (kernels/llvm_opt.py: why), with the real output's and
    bias's 16-byte alignment (the folded input and packed weight are fresh tensors, always aligned)."""
    cx = plan.constexprs
    fx = plan.fold_constexprs
    gen = torch.Generator(device=out.device).manual_seed(20261122)
    xs = (torch.rand((1, fx["C"], fx["H"], fx["W"]), generator=gen, device=out.device) * 2 - 1).to(weight.dtype)
    ws = aligned_random(tuple(weight.shape), weight, gen)
    bs = aligned_random(tuple(bias.shape), bias, gen) if bias is not None else None
    one = replace(plan, grid=(plan.grid[0] // plan.out_shape[0],), out_shape=(1,) + plan.out_shape[1:],
                  folded_shape=(1,) + plan.folded_shape[1:], rows=folded_rows(plan.folded_shape[1] * plan.folded_shape[2]))
    shape = (1, cx["OH"], cx["OW"], cx["C_OUT"]) if cx["OUT_CL"] else (1, cx["C_OUT"], cx["OH"], cx["OW"])
    outs = aligned_nan(shape, out)
    outs = outs.permute(0, 3, 1, 2) if cx["OUT_CL"] else outs
    wp = pack_weight(ws, one)
    ep = check_epilogue(epilogue, outs)
    with llvm_opt.compiling_at(level):
        _launch(one, fold(xs, one), wp, bs if bs is not None else wp, outs,
                ep.vectors if ep.vectors is not None else wp, ep.residual if ep.residual is not None else wp, level)
    return agrees(outs, xs, ws, bs, plan.stride, (fx["PH"], fx["PW"]), (1, 1), cx["PRECISION"], ep)


def _plan(x: torch.Tensor, g: ConvGeometry, has_bias: bool, meta: Meta, precision: str, out_cl: bool,
          chain: tuple[str, ...] = ()) -> LaunchPlan:
    return make_plan(g, has_bias, meta, precision, out_cl, x.element_size(), chain)


# the fold reads any layout (fold)
HOST = Host(_plan, lambda x, plan: x, run, dtypes=DTYPES, epilogues=POINTWISE_OPS)
launch, prepared = HOST.launch, HOST.prepared


def default_meta(out_channels: int, stride_w: int, width: int, precision: str = "tf32") -> Meta:
    """The configuration per problem class. tf32: L1 #50's best on the H200 (BM 64/128/256 × BN 128 or 64+32 × BK 16/32 × w 4/8 × s 3/4: M128-N64+32-K32-w4-s4, fold + convolution 0.415 ms;
    K32-w8-s4 0.420, K16-w4-s3 0.435). BLOCK_N 128 up to 128 channels (split to 64 + 32 at 65-96), 64 up to 64.
    Three products or FMA per multiply (tf32x3, ieee): smaller tiles, untuned."""
    block_n = 64 if out_channels <= 64 else 128
    if precision not in ("tf32", "tf32_trunc"):
        return Meta(BLOCK_M=64, BLOCK_N=block_n, BLOCK_K=16, num_warps=4, num_stages=3)
    return Meta(BLOCK_M=128, BLOCK_N=block_n, BLOCK_K=32, num_warps=4, num_stages=4)


# identity (kernels/identity.py): bump VERSION on a deliberate change of the host's numerics
VERSION = 1
SOURCE = KernelSource(VERSION, (_fold_kernel, _fold_rows_kernel, _conv2d_fold_kernel))
# b9f27fe16a27: the same kernel before it took an epilogue (a binary without one computes as it did)
PREVIOUS_SOURCE_HASHES = ("3de23ff7aff7", "b9f27fe16a27")


from convtune.kernels.variants.fold_igemm.export import render_kernelbench  # noqa: E402

register(KernelVariant(
    name="fold_igemm", launch=launch, prepared=prepared, library=HOST, default_meta=default_meta, source=SOURCE,
    previous_hashes=PREVIOUS_SOURCE_HASHES, tf32_ties=TF32_TIES, entry_points=("_conv2d_fold_kernel",),
    dilation_one=True, export=render_kernelbench, refuses=plan_refuses(make_plan)))
