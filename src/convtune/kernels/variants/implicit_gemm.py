"""`implicit_gemm`: the fast conv kernel. Same GEMM view as `seed` (M = output positions, N = C_out,
K = C_in·KH·KW), arranged for speed. See docs/PERFORMANCE.md for what each choice bought.

- The problem's shape, strides and padding are `tl.constexpr`: index division and modulo by constants
  compile to multiply-shift, and each shape gets its own specialised binary (one compile per shape).
- The K loop is a plain `range` (an `scf.for`), so Triton software-pipelines it `num_stages` deep:
  the stage knob is real here, unlike in `seed` whose `tl.static_range` unrolls the loop.
- A program's BLOCK_M positions never cross an image: the grid is images × tiles-per-image. Output
  positions of a tile are then contiguous in NCHW for every channel, so stores coalesce.
- Input addresses split into a per-position base and a per-k offset, added once per element; padding is
  tested with one unsigned compare per axis (a negative index wraps to a huge unsigned value).
- One BLOCK_N tile can cover all output channels (BLOCK_N >= C_out), so each gathered input tile is
  used for every channel instead of being gathered again per channel tile.
- The output is written NCHW, or channels_last where the caller's `out` is (OUT_CL). An input in any other
  layout than NCHW is converted by `launch`/`run`, inside the call (and so inside any timing of it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Optional, Sequence, Union

import torch
import triton
import triton.language as tl

from convtune.kernels.export_format import (IMPORTS, epilogue_source, launch_with_vectors, level2_chain, model_new,
                                            pinned_block, rounding_source, source_of)
from convtune.kernels.base import KernelVariant, register
from convtune.kernels.host import BoundLaunches, Host, alignment_key
from convtune.kernels.identity import KernelSource
from convtune.kernels.conv_args import ConvGeometry
from convtune.problem import POINTWISE_OPS
from convtune.kernels.meta import Meta
from convtune.kernels.runner import WeightCache
from convtune.kernels import llvm_opt, weight_pack
from convtune.kernels.epilogue import NO_EPILOGUE, Epilogue, apply_epilogue, code
from convtune.kernels.selfcheck import agrees, aligned_nan, check_epilogue, check_inputs
from convtune.kernels.precision import dot_precision, round_tf32, round_to_tf32, rounds_operands

IntPair = Union[int, Sequence[int]]

# How `tf32` breaks rounding ties: away from zero, as cuDNN does on the layers this kernel serves (L1 #50's kind,
# strided over few channels: kernels/precision.py)
TF32_TIES = "away"

@triton.jit
def _conv2d_igemm_kernel(
    x_ptr, w_ptr, b_ptr, y_ptr, e_ptr, r_ptr,
    C: tl.constexpr, H: tl.constexpr, W: tl.constexpr, C_OUT: tl.constexpr, OH: tl.constexpr, OW: tl.constexpr,
    KH: tl.constexpr, KWP: tl.constexpr, J0: tl.constexpr, SH: tl.constexpr, SW: tl.constexpr,
    PH: tl.constexpr, DH: tl.constexpr, DW: tl.constexpr, VEC: tl.constexpr,
    HAS_BIAS: tl.constexpr, PRECISION: tl.constexpr, ROUND_A: tl.constexpr, OUT_CL: tl.constexpr,
    EPILOGUE: tl.constexpr,  # the fused chain (kernels/epilogue.py; 0: none): vectors at e_ptr, residual at r_ptr
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    LLVM_OPT: tl.constexpr,  # unused in the body: keys the compile cache by kernels.llvm_opt's level
):
    # Reduction index k = (c·KH + r)·KWP + jj: jj runs over a kernel row padded to KWP (a multiple of VEC)
    # with zero weights, starting at column offset J0 (a multiple of VEC) from SW·ow. With DW == 1, each run
    # of VEC consecutive k then reads VEC consecutive, VEC-aligned input elements under one mask value.
    OHW: tl.constexpr = OH * OW
    K_TOTAL: tl.constexpr = C * KH * KWP

    TILES_PER_IMG: tl.constexpr = (OHW + BLOCK_M - 1) // BLOCK_M

    pid = tl.program_id(0)
    img = pid // TILES_PER_IMG
    pos = (pid % TILES_PER_IMG) * BLOCK_M + tl.arange(0, BLOCK_M)  # output positions inside one image
    m_mask = pos < OHW
    ih0 = (pos // OW) * SH - PH
    iw0 = (pos % OW) * SW + J0  # multiple of VEC: SW % VEC == 0 and J0 % VEC == 0
    x_img = x_ptr + img.to(tl.int64) * (C * H * W)
    a_base = tl.multiple_of(ih0 * W + iw0, VEC)

    offs_n = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    n_mask = offs_n < C_OUT

    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K_TOTAL, BLOCK_K):  # pipelined num_stages deep
        offs_k = k0 + tl.arange(0, BLOCK_K)
        c = offs_k // (KH * KWP)
        r = (offs_k % (KH * KWP)) // KWP * DH
        jj = offs_k % KWP * DW
        k_delta = tl.max_contiguous(tl.multiple_of(c * (H * W) + r * W + jj, VEC), VEC)
        ih = ih0[:, None] + r[None, :]
        iw = iw0[:, None] + jj[None, :]
        inside = (ih >= 0) & (ih < H) & (iw >= 0) & (iw < W)
        a = tl.load(x_img + (a_base[:, None] + k_delta[None, :]),
                    mask=inside & m_mask[:, None] & (offs_k < K_TOTAL)[None, :], other=0.0)
        if ROUND_A:  # to nearest TF32 as cuDNN does; the weights were rounded once, when packed
            a = round_tf32(a)
        b = tl.load(w_ptr + offs_n[None, :] * K_TOTAL + offs_k[:, None],
                    mask=(offs_k < K_TOTAL)[:, None] & n_mask[None, :], other=0.0)
        acc = tl.dot(a, b, acc, input_precision=PRECISION)

    if HAS_BIAS:
        acc += tl.load(b_ptr + offs_n, mask=n_mask, other=0.0)[None, :]
    y_img = y_ptr + img.to(tl.int64) * (C_OUT * OHW)  # an image is C_OUT·OHW elements in either layout
    if OUT_CL:  # channels_last: a position's channels are contiguous
        y_offs = pos[:, None] * C_OUT + offs_n[None, :]
    else:  # NCHW: a channel's positions are contiguous
        y_offs = offs_n[None, :] * OHW + pos[:, None]
    y_mask = m_mask[:, None] & n_mask[None, :]
    if EPILOGUE != 0:  # the residual is laid out as the output
        acc = apply_epilogue(acc, e_ptr, r_ptr + img.to(tl.int64) * (C_OUT * OHW), offs_n, n_mask, y_offs, y_mask,
                             C_OUT, EPILOGUE, y_ptr.dtype.element_ty)
    tl.store(y_img + y_offs, acc, mask=y_mask)


def choose_vec(x: torch.Tensor, width: int, stride_w: int, dil_w: int, precision: str = "tf32") -> int:
    """The widest input vector (4, 2 or 1 elements) whose alignment the kernel can promise. tf32x3 stops
    at 2: its three products make the K padding of VEC=4 (11 → 16 taps on L1 #50) expensive; best configs
    on an H200, L1 #50 tf32x3: VEC=2 1.61 ms, VEC=4 1.87 ms, VEC=1 3.51 ms."""
    for vec in ((2,) if precision == "tf32x3" else (4, 2)):
        if dil_w == 1 and stride_w % vec == 0 and width % vec == 0 and x.data_ptr() % (x.element_size() * vec) == 0:
            return vec
    return 1


def row_window(kw: int, pad_w: int, vec: int) -> tuple[int, int]:
    """(KWP, J0): a kernel row of kw taps at column offset -pad_w, widened to start and end on multiples
    of vec. vec == 1 keeps the row as it is."""
    if vec == 1:
        return kw, -pad_w
    j0 = -((pad_w + vec - 1) // vec) * vec  # floor(-pad_w / vec) · vec
    return -(-(kw - pad_w - j0) // vec) * vec, j0  # ceil((kw - pad_w - j0) / vec) · vec


def pack_weight(weight: torch.Tensor, pad_w: int, vec: int, round_tf32: bool = False) -> tuple[torch.Tensor, int, int]:
    """Zero-pad each kernel row to its aligned window (row_window), and round the weights to nearest TF32 if
    asked (once per weight here instead of once per tile in the kernel). Returns (packed weight, KWP, J0)."""
    kw = weight.shape[3]
    kwp, j0 = row_window(kw, pad_w, vec)
    if round_tf32:
        weight = round_to_tf32(weight)
    if vec == 1:
        return weight, kwp, j0
    packed = weight.new_zeros(weight.shape[:3] + (kwp,))
    packed[..., -pad_w - j0: -pad_w - j0 + kw] = weight
    return packed, kwp, j0


_packed = WeightCache()  # the packed weights, until the weight changes


def packed_weight(weight: torch.Tensor, pad_w: int, vec: int, round_tf32: bool) -> torch.Tensor:
    if vec == 1 and not round_tf32:
        return weight
    return _packed.get(weight, (pad_w, vec, round_tf32), lambda w: _pack(w, pad_w, vec, round_tf32))


def _pack(weight: torch.Tensor, pad_w: int, vec: int, round_tf32: bool) -> torch.Tensor:
    if weight.is_contiguous():  # one launch (weight_pack: why)
        kwp, j0 = row_window(weight.shape[3], pad_w, vec)
        return weight_pack.pack(weight, kwp, weight_pack.window_start(weight.shape[3], kwp, pad_w, j0), round_tf32)
    return pack_weight(weight, pad_w, vec, round_tf32)[0]


@dataclass(frozen=True)
class LaunchPlan:
    """Everything a launch needs that depends only on shapes, alignment and configuration."""

    grid: tuple[int, int]
    out_shape: tuple[int, int, int, int]
    pad_w: int
    vec: int
    round_weight: bool
    out_cl: bool  # writes a channels_last output
    constexprs: dict
    binary_key: tuple  # what, besides alignment, tells one compiled binary from another



def make_plan(g: ConvGeometry, has_bias: bool, vec: int, meta: Meta, precision: str,
              out_cl: bool = False, chain: tuple[str, ...] = ()) -> LaunchPlan:
    kwp, j0 = row_window(g.kw, g.padding[1], vec)
    tiles_per_img = triton.cdiv(g.oh * g.ow, meta.BLOCK_M)
    constexprs = dict(
        C=g.c, H=g.h, W=g.w, C_OUT=g.c_out, OH=g.oh, OW=g.ow, KH=g.kh, KWP=kwp, J0=j0,
        SH=g.stride[0], SW=g.stride[1], PH=g.padding[0], DH=g.dilation[0], DW=g.dilation[1], VEC=vec,
        HAS_BIAS=has_bias, PRECISION=dot_precision(precision), ROUND_A=rounds_operands(precision), OUT_CL=out_cl,
        EPILOGUE=code(chain), BLOCK_M=meta.BLOCK_M, BLOCK_N=meta.BLOCK_N, BLOCK_K=meta.BLOCK_K,
        num_warps=meta.num_warps, num_stages=meta.num_stages)
    grid = (g.n * tiles_per_img, triton.cdiv(g.c_out, meta.BLOCK_N))
    return LaunchPlan(grid, (g.n, g.c_out, g.oh, g.ow), g.padding[1], vec, rounds_operands(precision), out_cl,
                      constexprs, tuple(sorted(constexprs.items())))


def run(plan: LaunchPlan, x: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor],
        out: torch.Tensor, epilogue: Epilogue = NO_EPILOGUE) -> tuple[Any, str]:
    """Launch a plan on tensors that match it (the caller has checked them; `x` in the layout the plan was made
    for, NCHW-contiguous; `epilogue` the plan's chain). Returns the compiled kernel and the LLVM level it was compiled
    at (llvm_opt: a new binary is checked once, see there); a binary's later launches go past Triton's dispatch
    (host.BoundLaunches): under cProfile, in a converted ResNet-50 forward on the H200, a fused call took 72 us
    through the dispatch and a bound launch 48 us."""
    w = packed_weight(weight, plan.pad_w, plan.vec, plan.round_weight)
    b = bias if bias is not None else x
    e = epilogue.vectors if epilogue.vectors is not None else x
    r = epilogue.residual_as(plan.out_cl) if epilogue.residual is not None else x
    if x.device.type != "cuda":  # the interpreter compiles nothing
        return _conv2d_igemm_kernel[plan.grid](x, w, b, out, e, r, **plan.constexprs, LLVM_OPT="none"), "none"
    return _binaries.run(alignment_key(plan.binary_key, x.device, x, w, b, out, e, r), plan.grid, (x, w, b, out, e, r),
                         plan.constexprs, lambda lvl: _right_at(lvl, plan, x, weight, w, bias, out, epilogue),
                         lambda lvl: _conv2d_igemm_kernel[plan.grid](x, w, b, out, e, r, **plan.constexprs,
                                                                     LLVM_OPT=lvl))


_binaries = BoundLaunches("implicit_gemm", lambda: _conv2d_igemm_kernel, 6)


def _level(plan: LaunchPlan, x: torch.Tensor, weight: torch.Tensor, w: torch.Tensor, bias: Optional[torch.Tensor],
           out: torch.Tensor) -> str:
    """The LLVM level of this plan's binary (no epilogue) for these tensors' alignment and dtypes, under run's key:
    checked once for both (llvm_opt)."""
    b = bias if bias is not None else x
    return llvm_opt.choose(alignment_key(plan.binary_key, x.device, x, w, b, out, x, x),
                           lambda lvl: _right_at(lvl, plan, x, weight, w, bias, out),
                           lambda: f"implicit_gemm {plan.constexprs}")


BoundLaunch = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor], None]


def bind(plan: LaunchPlan, x: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor]) -> Optional[BoundLaunch]:
    """The plan's launch with its binary, grid and constexprs bound: `launch(x, packed_weight, bias or x, out)`
    for tensors aligned as these (and an output from torch's allocator). It skips Triton's per-call binding of
    26 arguments, its specialisation key and cache lookup (JITFunction.run), which took more host time than
    torch's whole convolution call inside a ResNet-50 forward. Launch
    hooks (profilers) still run: Triton's runner reads them on every call. Compiles and checks the binary as
    `run` does if no call has yet. None off CUDA, under the interpreter, and where this Triton's compiled kernel has no runner."""
    if x.device.type != "cuda" or not isinstance(_conv2d_igemm_kernel, triton.runtime.JITFunction):  # interpreter
        return None
    if plan.constexprs["EPILOGUE"]:  # the library's bound call is a convolution's alone
        return None
    w = packed_weight(weight, plan.pad_w, plan.vec, plan.round_weight)
    out = x.new_empty((1,) + plan.out_shape[1:])  # stands for the real output: same allocator, same alignment
    level = _level(plan, x, weight, w, bias, out)
    with llvm_opt.compiling_at(level):
        compiled = _conv2d_igemm_kernel.warmup(x, w, bias if bias is not None else x, out, x, x, **plan.constexprs,
                                               LLVM_OPT=level, grid=plan.grid)
    if not hasattr(type(compiled), "__getitem__"):
        return None
    runner = compiled[(plan.grid[0], plan.grid[1], 1)]
    tail = tuple(level if n == "LLVM_OPT" else plan.constexprs[n] for n in _conv2d_igemm_kernel.arg_names[6:])

    def launch(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor, out: torch.Tensor) -> None:
        runner(x, w, b, out, x, x, *tail)
    return launch


def bound_call(plan: LaunchPlan, x: torch.Tensor, weight: torch.Tensor,
               bias: Optional[torch.Tensor]) -> Optional[Callable[..., torch.Tensor]]:
    """The registry's bound launch (KernelVariant.bind): a call (x, weight, bias) → output of a signature whose plan
    writes NCHW, with the weight packed (cached per weight tensor) and the binary bound (bind); None where it has
    none."""
    if plan.out_cl:
        return None
    launch = bind(plan, x, weight, bias)
    if launch is None:
        return None
    shape, pad_w, vec, round_weight = plan.out_shape, plan.pad_w, plan.vec, plan.round_weight

    def call(x: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor]) -> torch.Tensor:
        out = x.new_empty(shape)
        launch(x, packed_weight(weight, pad_w, vec, round_weight), bias if bias is not None else x, out)
        return out
    return call


def _right_at(level: str, plan: LaunchPlan, x: torch.Tensor, weight: torch.Tensor, w: torch.Tensor,
              bias: Optional[torch.Tensor], out: torch.Tensor, epilogue: Epilogue = NO_EPILOGUE) -> bool:
    """Compile the plan's binary at `level` and run it on one random image (N is no constexpr: the binary is
    the same for any batch) against float64, with its epilogue. Inputs keep the real ones' 16-byte alignment."""
    cx = plan.constexprs
    xs, ws, bs, outs = check_inputs(1, x, weight, bias, out)
    if plan.out_cl:  # channels_last, with the real output's alignment
        outs = aligned_nan((1,) + tuple(out.shape[2:]) + (out.shape[1],), out).permute(0, 3, 1, 2)
    eps = check_epilogue(epilogue, outs)
    wp = pack_weight(ws, plan.pad_w, plan.vec, plan.round_weight)[0] if w is not weight else ws
    grid = (plan.grid[0] // x.shape[0], plan.grid[1])
    with llvm_opt.compiling_at(level):
        _conv2d_igemm_kernel[grid](xs, wp, bs if bs is not None else xs, outs,
                                   eps.vectors if eps.vectors is not None else xs,
                                   eps.residual if eps.residual is not None else xs, **cx, LLVM_OPT=level)
    return agrees(outs, xs, ws, bs, (cx["SH"], cx["SW"]), (cx["PH"], plan.pad_w), (cx["DH"], cx["DW"]), cx["PRECISION"],
                  eps)


def _plan(x: torch.Tensor, g: ConvGeometry, has_bias: bool, meta: Meta, precision: str, out_cl: bool,
          vec: Optional[int] = None, chain: tuple[str, ...] = ()) -> LaunchPlan:
    """The plan, with the input's vector width (1, 2, 4): `vec`, or the widest that the alignment of `x` as the
    kernel reads it (NCHW-contiguous: a fresh, so aligned, copy where it is not) and the precision allow."""
    if vec is None:
        vec = choose_vec(x if x.is_contiguous() else x.contiguous(), g.w, g.stride[1], g.dilation[1], precision)
    return make_plan(g, has_bias, vec, meta, precision, out_cl, chain)


# implicit_gemm reads NCHW: an input that is not is copied inside the call; its weight unpacked where the row needs no
# padding (pack_weight), so that must be contiguous. The library binds its launches itself (bind).
HOST = Host(_plan, lambda x, plan: x.contiguous(), run, weight_as_is=True, dtypes=("float32", "bfloat16", "float16"),
            epilogues=POINTWISE_OPS)
launch, prepared = HOST.launch, HOST.prepared


def default_meta(out_channels: int, stride_w: int, width: int, precision: str = "tf32") -> Meta:
    """The default configuration per problem class, from a sweep on an H200 (docs/PERFORMANCE.md). A pin for the exact problem and GPU takes precedence (convtune.pins)."""
    block_n = 64 if out_channels <= 64 else 128  # one tile covers every channel up to 128
    if precision == "tf32x3" and stride_w % 2 == 0 and width % 2 == 0:
        # VEC=2 path, three products per multiply: 256-row tiles spill (255 registers, 98-172 spilled,
        # 2.8-3.0 ms); M128-N128-K32-w8-s3 1.61 ms, M128-K16 1.80 ms.
        return Meta(BLOCK_M=128, BLOCK_N=block_n, BLOCK_K=32, num_warps=8, num_stages=3)
    if stride_w % 4 == 0 and width % 4 == 0 and precision == "tf32":
        # The VEC=4 gather path (L1 #50) with the input rounded to nearest TF32 in the kernel: that rounding
        # sends the A tile through registers, which cost M256-w8-s4 16 % (0.601 vs 0.515 ms truncating); the
        # smaller tile with a deeper pipeline hides it: M128-w4-s6 0.520 ms, s5 0.521, s4 0.529 (one H200 run).
        return Meta(BLOCK_M=128, BLOCK_N=block_n, BLOCK_K=16, num_warps=4, num_stages=6)
    if stride_w % 4 == 0 and width % 4 == 0:
        # The VEC=4 gather path (L1 #50), truncating: M256-K16-w8-s4 0.520 ms; M128-w8-s4 0.529; M128-w4-s3 0.565.
        return Meta(BLOCK_M=256, BLOCK_N=block_n, BLOCK_K=16, num_warps=8, num_stages=4)
    # Stride-1/2 layers: BM=64 beat BM=128 by 20-30 % at BN=128 (alexnet_conv3 0.758 vs 0.983 ms);
    # with BN=64, BM=128 won (resnet50_stem 0.305 vs 0.323 ms).
    return Meta(BLOCK_M=128 if block_n == 64 else 64, BLOCK_N=block_n, BLOCK_K=32, num_warps=4, num_stages=3)
# identity (kernels/identity.py): bump VERSION on a deliberate change of the host's numerics
VERSION = 1
SOURCE = KernelSource(VERSION, (_conv2d_igemm_kernel, round_tf32))
# 6dc0b20b7746: the same kernel before it took an epilogue (a binary without one computes as it did)
PREVIOUS_SOURCE_HASHES = ("d1dc565d8466", "6dc0b20b7746")



# KernelBench's one-file export of this kernel at a pinned configuration (`python promote.py export=kernelbench`)
def render_kernelbench(p: Any, m: dict, precision: str, provenance: str) -> str:
    from convtune.kernels.variants import implicit_gemm as ig

    chain = level2_chain(p)
    wrapper = pinned_block(m, precision, provenance, p) + (f"EPILOGUE = {code(chain)}  # {', '.join(chain)}: "
                                                           "apply_epilogue's ops, 4 bits each\n" if chain else
                                                           "EPILOGUE = 0\n") + f'''

def conv2d_triton(x, weight, bias, packed=None, vectors=None):
    """`packed`: pack_weight's (weight, KWP, J0) for this input's vector width, made here when not given; `vectors`:
    the epilogue's per-channel rows (EPILOGUE: each op's scale and shift)."""
    n, c, h, w = x.shape
    c_out, _, kh, kw = weight.shape
    oh = (h + 2 * PADDING[0] - DILATION[0] * (kh - 1) - 1) // STRIDE[0] + 1
    ow = (w + 2 * PADDING[1] - DILATION[1] * (kw - 1) - 1) // STRIDE[1] + 1
    out = torch.empty((n, c_out, oh, ow), device=x.device, dtype=x.dtype)
    vec = choose_vec(x, w, STRIDE[1], DILATION[1], "{precision}")
    wp, kwp, j0 = packed if packed is not None else pack_weight(weight, PADDING[1], vec, ROUND)
    grid = (n * triton.cdiv(oh * ow, BLOCK_M), triton.cdiv(c_out, BLOCK_N))
    _conv2d_igemm_kernel[grid](
        x, wp, bias if bias is not None else x, out, vectors if vectors is not None else x, x,
        C=c, H=h, W=w, C_OUT=c_out, OH=oh, OW=ow, KH=kh, KWP=kwp, J0=j0, SH=STRIDE[0], SW=STRIDE[1],
        PH=PADDING[0], DH=DILATION[0], DW=DILATION[1], VEC=vec, HAS_BIAS=bias is not None, PRECISION=PRECISION,
        ROUND_A=ROUND, OUT_CL=False, EPILOGUE=EPILOGUE, BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K, num_warps=NUM_WARPS, num_stages=NUM_STAGES,
        LLVM_OPT="O3",  # Triton's own level: every size is a constexpr, so the judge's check covers this binary
    )
    return out
''' + model_new(p, f'''\
        x, w = x.contiguous(), self.conv1.weight
        vec = choose_vec(x, x.shape[3], STRIDE[1], DILATION[1], "{precision}")
        key = (w.data_ptr(), w._version, vec)  # pad and round the weight again only when it changes
        if self._packed_for != key:
            self._packed, self._packed_for = pack_weight(w.detach(), PADDING[1], vec, ROUND), key
''' + launch_with_vectors(p))
    return "\n\n".join((IMPORTS, rounding_source(), epilogue_source(), source_of(ig._conv2d_igemm_kernel),
                        source_of(ig.choose_vec, ig.row_window, ig.pack_weight))) + "\n" + wrapper


register(KernelVariant(
    name="implicit_gemm", launch=launch, prepared=prepared, library=HOST, default_meta=default_meta,
    source=SOURCE, previous_hashes=PREVIOUS_SOURCE_HASHES, tf32_ties=TF32_TIES,
    entry_points=("_conv2d_igemm_kernel",), export=render_kernelbench,
    # the library's default for every call no higher-ranked variant serves; implicit_gemm reads NCHW: where x is not,
    # the kernel reads a fresh (so aligned) copy, as the library's call makes it
    serves=lambda layout, in_channels: True, rank=0, bind=bound_call))
