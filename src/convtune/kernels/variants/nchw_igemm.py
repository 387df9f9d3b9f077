"""`nchw_igemm`: the stride-1 implicit GEMM of `nhwc_igemm`, read straight from an NCHW input.

The GEMM is nhwc_igemm's: M = output positions, N = C_out, K = taps × input channels, tap by tap with the channels
innermost; the weight packed [C_out, KH, KW, C_in], rounded once, the K-major B operand through TMA (nhwc_igemm's
packing). What differs is the A tile: BLOCK_K channels × BLOCK_M positions of one image, loaded with the positions
contiguous. Where the output is as wide as the input (stride 1 and 2·padding_w = dilation_w·(kernel_w − 1): "same"
padding along W), the address of tap (r, s) at output position p is p + (r·DH − PH)·W + s·DW − PW + c·H·W, affine in
p, so a warp's loads are 128 contiguous bytes; a tap's shift leaves them 4-byte aligned, so they are scalar loads
(TMA cannot take such a shift: on the H200 a tile at an innermost coordinate that is not a multiple of 4 floats ended
in "an illegal instruction"). TF32 wgmma cannot take a positions-contiguous
tile from shared memory (K-major only) but can from registers: the tile is rounded to nearest TF32 there (ties to
even, as cuDNN at stride 1) and is the MMA's register A, as in `nchw_1x1`. A program's positions stay in one image
(grid: an image's position tiles × C_out tiles, images), its C_out tiles side by side so that they share its input
rows in L2. The output is written in the call's layout.

Why: with an NCHW input `nhwc_igemm` runs after a copy of the input to channels_last inside the call, and on large
images that copy is most of the gap to cuDNN. On the H200, vgg16_conv3_2 with an NCHW input takes 0.3898 ms at
M64-N256-K32-w4-s3 against 0.4168 for nhwc_igemm after the copy and cuDNN's 0.3687 channels_last, 0.4850 NCHW: 0.95x cuDNN's faster
layout instead of 0.88x. Where C_out needs more than one 256-wide tile, or the input has 384 channels, the register
path costs more than the copy saves (alexnet_conv5 10 %, conv2 25 %, conv3 51 %, conv4 56 % slower than the
library's path; resnet50_layer2_3x3 level), so it is a library kernel for the contest to pin where it wins, not the
rule's default.

What it takes (make_plan refuses the rest in one line): precision tf32, stride 1, "same" padding along W (above), any
kernel, padding along H and dilation, up to 65535 images, an image's input and output under 2**31 elements.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any, Optional

import torch
import triton
import triton.language as tl

from convtune.errors import ConfigError, UnsupportedProblem
from convtune.kernels import llvm_opt
from convtune.kernels.base import KernelVariant, Knob, Space, register
from convtune.kernels.host import BoundLaunches, Host, alignment_key, one_image, without_input
from convtune.kernels.base import log_uniform_int
from convtune.kernels.conv_args import out_size
from convtune.kernels.identity import KernelSource
from convtune.kernels.conv_args import ConvGeometry
from convtune.kernels.meta import Meta
from convtune.kernels.nhwc_tiles import pack_weight, packed_weight, tma_fits, weight_arg  # its weight operand
from convtune.kernels.precision import CVT_RN_TF32_CAPABILITY, round_tf32_even, round_tf32_even_bits, round_tf32_even_ptx
from convtune.kernels.epilogue import NO_EPILOGUE, Epilogue, apply_epilogue, code
from convtune.kernels.selfcheck import agrees, check_epilogue
from convtune.problem import POINTWISE_OPS

RESTRICTED_TO = "precision tf32, stride 1, an output as wide as the input, up to 65535 images"
TF32_TIES = "even"  # as cuDNN on the stride-1 layers (kernels/precision.py)
PRECISIONS = ("tf32",)  # what make_plan takes
MAX_IMAGES = 65535  # the grid's second axis
# The meta-parameters a launch may take: a tile of positions is whole 64-row MMAs of a warpgroup
SPACE = Space("nchw_igemm", (
    Knob("BLOCK_M", (64, 128, 256), "positions a tile: whole 64-row MMAs"),
    Knob("BLOCK_N", (16, 32, 64, 128, 256), "output channels a tile"),
    Knob("BLOCK_K", (16, 32, 64), "input channels a K step"),
    Knob("num_warps", (4, 8), "one or two warpgroups")))


@triton.jit
def _conv2d_nchw_kernel(
    x_ptr, w_ptr, b_ptr, y_ptr, e_ptr, r_ptr,  # w_ptr: a TMA descriptor of the packed weight as [C_OUT, K] (W_TMA),
    #                                            or the weight
    C: tl.constexpr, H: tl.constexpr, W: tl.constexpr, C_OUT: tl.constexpr, OH: tl.constexpr,
    KH: tl.constexpr, KW: tl.constexpr, PH: tl.constexpr, PW: tl.constexpr, DH: tl.constexpr, DW: tl.constexpr,
    HAS_BIAS: tl.constexpr, OUT_CL: tl.constexpr, W_TMA: tl.constexpr,
    EPILOGUE: tl.constexpr,  # the fused chain (kernels/epilogue.py; 0: none): vectors at e_ptr, residual at r_ptr
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    LLVM_OPT: tl.constexpr,  # unused in the body: keys the compile cache by kernels.llvm_opt's level
):
    pid = tl.program_id(0)
    n = tl.program_id(1)
    OHW: tl.constexpr = OH * W  # the output is as wide as the input
    TILES_N: tl.constexpr = (C_OUT + BLOCK_N - 1) // BLOCK_N
    pid_n = pid % TILES_N  # a position tile's C_out tiles side by side: they share its input rows in L2
    pid_m = pid // TILES_N
    p = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)  # output positions in image n
    m_mask = p < OHW
    oh = p // W
    ow = p % W
    x_img = x_ptr + n.to(tl.int64) * (C * H * W)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    n_mask = offs_n < C_OUT
    offs_k = tl.arange(0, BLOCK_K)
    K_TOTAL: tl.constexpr = KH * KW * C
    C_BLOCKS: tl.constexpr = (C + BLOCK_K - 1) // BLOCK_K
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for t in range(KH * KW * C_BLOCKS):  # pipelined num_stages deep
        tap = t // C_BLOCKS
        dr = (tap // KW) * DH - PH  # the tap's input row and column, relative to the output position's
        ds = (tap % KW) * DW - PW
        c = (t % C_BLOCKS) * BLOCK_K + offs_k
        inside = m_mask & (oh + dr >= 0) & (oh + dr < H) & (ow + ds >= 0) & (ow + ds < W)
        # p + dr·W + ds is the input position: positions contiguous in memory, one warp's loads 128 bytes
        x = tl.load(x_img + (p + (dr * W + ds))[:, None] + c[None, :] * (H * W),
                    mask=inside[:, None] & (c < C)[None, :], other=0.0)
        a = round_tf32_even(x)  # in registers, where the MMA takes its A operand from; the weight was rounded packed
        if W_TMA:  # past C the tile holds the next tap's weights, multiplied by A's zeros; past K, zeros
            b = w_ptr.load([pid_n * BLOCK_N, tap * C + (t % C_BLOCKS) * BLOCK_K]).T
        else:
            b = tl.load(w_ptr + offs_n[None, :] * K_TOTAL + (tap * C + c)[:, None],
                        mask=(c < C)[:, None] & n_mask[None, :], other=0.0)
        acc = tl.dot(a, b, acc, input_precision="tf32")

    if HAS_BIAS:
        acc += tl.load(b_ptr + offs_n, mask=n_mask, other=0.0)[None, :]
    if OUT_CL:  # channels_last: a position's channels are contiguous
        y_offs = (n.to(tl.int64) * OHW + p)[:, None] * C_OUT + offs_n[None, :]
    else:  # NCHW: a channel's positions are contiguous
        y_offs = n.to(tl.int64) * (C_OUT * OHW) + p[:, None] + offs_n[None, :] * OHW
    y_mask = m_mask[:, None] & n_mask[None, :]
    if EPILOGUE != 0:  # the residual is laid out as the output
        acc = apply_epilogue(acc, e_ptr, r_ptr, offs_n, n_mask, y_offs, y_mask, C_OUT, EPILOGUE, y_ptr.dtype.element_ty)
    tl.store(y_ptr + y_offs, acc, mask=y_mask)


@dataclass(frozen=True)
class LaunchPlan:
    """Everything a launch needs that depends only on shapes and configuration."""

    grid: tuple[int, int]  # (position tiles × channel tiles, images)
    out_shape: tuple[int, int, int, int]
    out_cl: bool
    constexprs: dict
    binary_key: tuple


def check_meta(meta: Meta) -> None:
    """ConfigError naming the first meta-parameter this kernel does not take (SPACE)."""
    SPACE.check(meta)
    if meta.num_stages < 1:
        raise ConfigError("num_stages", meta.num_stages, "an integer >= 1")


def make_plan(g: ConvGeometry, has_bias: bool, meta: Meta, precision: str, out_cl: bool = False,
              chain: tuple[str, ...] = ()) -> LaunchPlan:
    """The plan of a call, or UnsupportedProblem (ConfigError for the configuration) naming what this kernel does not
    take and what runs it instead. `chain`: the epilogue it fuses (kernels/epilogue.py)."""
    other = "; nhwc_igemm and implicit_gemm run any convolution"
    if precision != "tf32":
        raise UnsupportedProblem(f"nchw_igemm runs precision tf32 only (it rounds the input to TF32 as cuDNN does), got "
                                 f"{precision!r}{other}")
    if g.stride != (1, 1) or g.ow != g.w:
        raise UnsupportedProblem(f"nchw_igemm takes stride 1 and an output as wide as the input (2*padding_w == "
                                 f"dilation_w*(kernel_w-1)), got stride {list(g.stride)}, width {g.w} -> {g.ow}{other}")
    if g.n > MAX_IMAGES:
        raise UnsupportedProblem(f"nchw_igemm takes at most {MAX_IMAGES} images a call (its grid's second axis), got "
                                 f"{g.n}{other}")
    if max(g.c * g.h * g.w, g.c_out * g.oh * g.ow) >= 2**31:
        raise UnsupportedProblem(f"nchw_igemm indexes an image in int32: its input and output must each have < 2**31 "
                                 f"elements, got {g.c * g.h * g.w} and {g.c_out * g.oh * g.ow}{other}")
    check_meta(meta)
    cx = dict(C=g.c, H=g.h, W=g.w, C_OUT=g.c_out, OH=g.oh, KH=g.kh, KW=g.kw, PH=g.padding[0], PW=g.padding[1],
              DH=g.dilation[0], DW=g.dilation[1], HAS_BIAS=has_bias, OUT_CL=out_cl, W_TMA=tma_fits(g.c),
              EPILOGUE=code(chain), BLOCK_M=meta.BLOCK_M, BLOCK_N=meta.BLOCK_N, BLOCK_K=meta.BLOCK_K, num_warps=meta.num_warps,
              num_stages=meta.num_stages)
    grid = (triton.cdiv(g.oh * g.ow, meta.BLOCK_M) * triton.cdiv(g.c_out, meta.BLOCK_N), g.n)
    return LaunchPlan(grid, (g.n, g.c_out, g.oh, g.ow), out_cl, cx, tuple(sorted(cx.items())))


def readable_input(x: torch.Tensor, plan: LaunchPlan) -> torch.Tensor:
    """The input as the kernel reads it: NCHW-contiguous. Any other input (channels_last) is copied, inside the call."""
    return x.contiguous()


def _launch(cx: dict, grid: tuple[int, int], x: torch.Tensor, wp: torch.Tensor, b: torch.Tensor, out: torch.Tensor,
            e: torch.Tensor, r: torch.Tensor, level: str) -> Any:
    return _conv2d_nchw_kernel[grid](x, weight_arg(cx, wp), b, out, e, r, **cx, LLVM_OPT=level)


_binaries = BoundLaunches("nchw_igemm", lambda: _conv2d_nchw_kernel, 6)


def run(plan: LaunchPlan, x: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor],
        out: torch.Tensor, epilogue: Epilogue = NO_EPILOGUE) -> tuple[Any, str]:
    """Launch a plan on tensors that match it (`x` NCHW-contiguous, `out` in the plan's layout, `epilogue` the plan's
    chain). Returns the compiled kernel and the LLVM level it was compiled at (kernels/llvm_opt)."""
    wp = packed_weight(weight, True)
    b = bias if bias is not None else out  # not read without a bias (HAS_BIAS)
    e = epilogue.vectors if epilogue.vectors is not None else out  # not read without a chain that uses them
    r = epilogue.residual_as(plan.out_cl) if epilogue.residual is not None else out
    cx = plan.constexprs
    if x.device.type != "cuda":  # the interpreter compiles nothing
        return _launch(cx, plan.grid, x, wp, b, out, e, r, "none"), "none"
    return _binaries.run(alignment_key(plan.binary_key, x.device, x, b, out, e, r), plan.grid,
                         (x, weight_arg(cx, wp), b, out, e, r), cx,
                         lambda lvl: _right_at(lvl, plan, x, weight, bias, out, epilogue),
                         lambda lvl: _launch(cx, plan.grid, x, wp, b, out, e, r, lvl))


def _right_at(level: str, plan: LaunchPlan, x: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor],
              out: torch.Tensor, epilogue: Epilogue = NO_EPILOGUE) -> bool:
    """Compile the binary at `level` and run it on one image (the batch is the grid's, not the binary's) against
    float64, with its epilogue (kernels/llvm_opt.py: why)."""
    cx = plan.constexprs
    t = one_image(x, weight, bias, out, (cx["C"], cx["H"], cx["W"]), False, plan.out_shape[1:], plan.out_cl, 20261124)
    ep = check_epilogue(epilogue, t.out)
    with llvm_opt.compiling_at(level):
        _launch(cx, (plan.grid[0], 1), t.x, pack_weight(t.weight, True), t.bias if t.bias is not None else t.out,
                t.out, ep.vectors if ep.vectors is not None else t.out,
                ep.residual if ep.residual is not None else t.out, level)
    return agrees(t.out, t.x, t.weight, t.bias, (1, 1), (cx["PH"], cx["PW"]), (cx["DH"], cx["DW"]), "tf32", ep)


HOST = Host(without_input(make_plan), readable_input, run, epilogues=POINTWISE_OPS)
launch, prepared = HOST.launch, HOST.prepared


def default_meta(out_channels: int, stride_w: int, width: int, precision: str = "tf32") -> Meta:
    """One 256-wide tile of output channels where one covers them (vgg16_conv3_2's best on the H200, 0.3898 ms; M128-
    N256-w8 0.4260), else 128 wide
    (alexnet_conv3/4's best tile width; none of them faster than the library's other paths); up to 128 channels one
    tile of M128 (resnet50_layer2_3x3's best, 0.0916 ms at K16, 0.0924 at K32), 64 wide up to 64 channels (not measured:
    half of a 128-wide tile would be zeros)."""
    if out_channels > 128:
        return Meta(BLOCK_M=64, BLOCK_N=256 if out_channels <= 256 else 128, BLOCK_K=32, num_warps=4, num_stages=3)
    return Meta(BLOCK_M=128, BLOCK_N=128 if out_channels > 64 else 64, BLOCK_K=32, num_warps=4, num_stages=3)


# identity (kernels/identity.py): bump VERSION on a deliberate change of the host's numerics
VERSION = 1
SOURCE = KernelSource(VERSION, (_conv2d_nchw_kernel, round_tf32_even_bits, round_tf32_even_ptx))
# c2e32119a708: the same kernel before it took an epilogue (a binary without one computes as it did)
PREVIOUS_SOURCE_HASHES = ("60e27b4908ec", "c2e32119a708")



def draw_case(rng: random.Random, small: bool) -> dict[str, Any]:
    """verify's case draw (convtune.commands.verify): a case in nchw_igemm's family (kernels/variants/nchw_igemm.make_plan): stride 1 and an output as wide as the input (a
    kernel 1, 3, 5 or 7 wide with the padding along W that keeps the width; 1-7 high with any padding along H), dilation
    1-2; 1-512 input and output channels (log-uniform), sizes 1-80, batch 1-16; the default configuration or a random one
    that fits shared memory."""
    while True:
        kh, kw = rng.randint(1, 7), rng.choice([1, 3, 5, 7])
        dh, dw = rng.choice([1, 1, 2]), rng.choice([1, 1, 2])
        ph, pw = rng.randint(0, dh * (kh - 1)), dw * (kw - 1) // 2
        h, w = (rng.randint(1, 9), rng.randint(1, 9)) if small else (rng.randint(1, 80), rng.randint(1, 80))
        if out_size(h, kh, 1, ph, dh) >= 1:
            break
    c, k = (rng.randint(1, 24), rng.randint(1, 40)) if small else (log_uniform_int(rng, 1, 512), log_uniform_int(rng, 1, 512))
    n = rng.randint(1, 2) if small else rng.choice([1, 1, 2, 3, 4, 8, 16])
    meta = None
    if rng.random() >= 0.3:
        while True:
            meta = dict(BLOCK_M=64 if small else rng.choice([64, 128, 256]),
                        BLOCK_N=rng.choice([16, 32, 64] if small else [16, 32, 64, 128, 256]),
                        BLOCK_K=16 if small else rng.choice([16, 32, 64]), num_warps=rng.choice([4, 8]),
                        num_stages=rng.choice([1, 2, 3, 4]))
            if (meta["BLOCK_M"] + meta["BLOCK_N"]) * meta["BLOCK_K"] * 4 * meta["num_stages"] <= 160 * 1024:
                break
    return dict(n=n, c=c, h=h, w=w, k=k, kh=kh, kw=kw, stride=(1, 1), padding=(ph, pw), dilation=(dh, dw),
                bias=rng.random() < 0.7, offset=rng.choice([0, 0, 1, 2, 3]), init=rng.choice(["rand", "randn"]),
                meta=meta, seed=rng.randrange(2**31), layout=rng.choice(["nchw", "channels_last"]))


register(KernelVariant(
    name="nchw_igemm", launch=launch, prepared=prepared, library=HOST, default_meta=default_meta,
    source=SOURCE, previous_hashes=PREVIOUS_SOURCE_HASHES, tf32_ties=TF32_TIES,
    entry_points=("_conv2d_nchw_kernel",), restricted_to=RESTRICTED_TO, draw_case=draw_case, precisions=PRECISIONS,
    compute_capability=CVT_RN_TF32_CAPABILITY, space=SPACE))
