"""`nchw_1x1`: a 1×1 stride-1 convolution read straight from NCHW, as the batched GEMM it is.

With a 1×1 kernel, stride 1 and no padding, image n's output is Xₙᵀ·Wᵀ: M = the image's H·W positions, N = C_out,
K = C_in. In NCHW an input tile is BLOCK_K channels × BLOCK_M positions with the positions contiguous, which TF32 wgmma
cannot take from shared memory as its A operand (K-major only) but can from registers: the tile comes in through a
3-D TMA descriptor of the input as [N, C_in, H·W] (zeros past C_in and H·W), is rounded to nearest TF32 in registers
(ties to even, as cuDNN does at stride 1), and is the MMA's register A; the weight, rounded once when packed, is the
K-major B operand. The output is written in the call's layout (NCHW: a channel's positions contiguous). A program
computes one tile of BLOCK_M positions × BLOCK_N output channels of one image; a position tile's channel tiles are
neighbours in the grid, so the input tile they share is read once from DRAM. Where H·W is not a multiple of 4 (a
TMA row must start 16-byte aligned) the tile is a masked load instead.

Why: on resnet50_layer1_1x1 with an NCHW input, nhwc_igemm needs a copy of the 205 MB input to channels_last and
implicit_gemm breaks TF32 ties away from zero (1.9e-4 from cuDNN). On the H200 this kernel takes 0.0698 ms at
M64-N64-K32-w4-s3 against cuDNN's 0.0737 NCHW and 0.0728 channels_last (1.04x; 3.7 TB/s), implicit_gemm 0.0844;
masked loads instead of TMA 0.0950 at their best; the input as the B operand (stored transposed in shared memory)
slower than 0.104 at every tile. Tiles of 128 output channels gave wrong outputs on the H200 (0.25-0.42 from the
exact sum, two shapes, with TMA; right without) where 64 gave none wrong in 108 configurations, so BLOCK_N is at most
64 (check_meta).

A 16-bit call (bfloat16, float16) takes its operands as they are: nothing to round, the 16-bit MMA with float32
accumulation.

What it takes (make_plan refuses the rest in one line): precision tf32 for float32, a 1×1 kernel, stride 1 and no padding (any
dilation: a 1×1 kernel has none to dilate), up to 65535 images (the grid's second axis).
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
from convtune.kernels.host import BoundLaunches, Host, alignment_key, one_image
from convtune.kernels.base import log_uniform_int
from convtune.kernels.identity import KernelSource
from convtune.kernels.conv_args import ConvGeometry
from convtune.kernels.meta import Meta
from convtune.kernels.runner import WeightCache
from convtune.kernels.precision import (CVT_RN_TF32_CAPABILITY, round_tf32_even, round_tf32_even_bits,
                                       round_tf32_even_ptx, round_to_tf32_even)
from convtune.kernels.epilogue import NO_EPILOGUE, Epilogue, apply_epilogue, code
from convtune.kernels.selfcheck import agrees, check_epilogue
from convtune.problem import POINTWISE_OPS

RESTRICTED_TO = "precision tf32 (float32), a 1x1 kernel, stride 1, padding 0, up to 65535 images"
DTYPES = ("float32", "bfloat16", "float16")
TF32_TIES = "even"  # as cuDNN on the stride-1 layers (kernels/precision.py): the 1×1 3.1e-6 from it so, 1.9e-4 away
PRECISIONS = ("tf32",)  # what make_plan takes
MAX_IMAGES = 65535  # the grid's second axis
# The meta-parameters a launch may take. BLOCK_N 128 was wrong on the H200 (module docstring); a tile of positions is
# one or more 64-row MMAs of a warpgroup
SPACE = Space("nchw_1x1", (
    Knob("BLOCK_M", (64, 128, 256), "positions a tile: whole 64-row MMAs"),
    Knob("BLOCK_N", (16, 32, 64), "output channels a tile: 128 gave wrong outputs on the H200"),
    Knob("BLOCK_K", (16, 32, 64), "input channels a K step"),
    Knob("num_warps", (4, 8), "one or two warpgroups")))


@triton.jit
def _conv2d_1x1_kernel(
    x_ptr, w_ptr, b_ptr, y_ptr, e_ptr, r_ptr,  # x_ptr: a TMA descriptor of the input as [N, C, H·W] (X_TMA), else it
    C: tl.constexpr, HW: tl.constexpr, C_OUT: tl.constexpr,
    HAS_BIAS: tl.constexpr, OUT_CL: tl.constexpr, X_TMA: tl.constexpr, ROUND: tl.constexpr,
    EPILOGUE: tl.constexpr,  # the fused chain (kernels/epilogue.py; 0: none): vectors at e_ptr, residual at r_ptr
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    LLVM_OPT: tl.constexpr,  # unused in the body: keys the compile cache by kernels.llvm_opt's level
):
    pid = tl.program_id(0)
    n = tl.program_id(1)
    TILES_N: tl.constexpr = (C_OUT + BLOCK_N - 1) // BLOCK_N
    pid_n = pid % TILES_N  # a position tile's channel tiles side by side: they share its input tile in L2
    pid_m = pid // TILES_N
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    m_mask = offs_m < HW
    n_mask = offs_n < C_OUT
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, C, BLOCK_K):  # pipelined num_stages deep
        k = k0 + offs_k
        if X_TMA:  # zeros past C and HW
            x = x_ptr.load([n, k0, pid_m * BLOCK_M]).reshape(BLOCK_K, BLOCK_M)
        else:
            x = tl.load(x_ptr + n.to(tl.int64) * (C * HW) + k[:, None] * HW + offs_m[None, :],
                        mask=(k < C)[:, None] & m_mask[None, :], other=0.0)
        if ROUND:  # float32: rounded in registers, where the MMA takes its A operand from; the weight when packed
            x = round_tf32_even(x)
        a = tl.trans(x)
        w = tl.load(w_ptr + offs_n[:, None] * C + k[None, :], mask=n_mask[:, None] & (k < C)[None, :], other=0.0)
        acc = tl.dot(a, tl.trans(w), acc, input_precision="tf32")

    if HAS_BIAS:
        acc += tl.load(b_ptr + offs_n, mask=n_mask, other=0.0)[None, :]
    if OUT_CL:  # channels_last: a position's channels are contiguous
        y_offs = (n.to(tl.int64) * HW + offs_m)[:, None] * C_OUT + offs_n[None, :]
    else:  # NCHW: a channel's positions are contiguous
        y_offs = n.to(tl.int64) * (C_OUT * HW) + offs_m[:, None] + offs_n[None, :] * HW
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


def tma_fits(hw: int, element_bytes: int = 4) -> bool:
    """A TMA descriptor of the input as [N, C, H·W] needs each channel's row to start 16-byte aligned."""
    return (hw * element_bytes) % 16 == 0


def make_plan(g: ConvGeometry, has_bias: bool, meta: Meta, precision: str, out_cl: bool = False,
              element_bytes: int = 4, chain: tuple[str, ...] = ()) -> LaunchPlan:
    """The plan of a call whose tensors have `element_bytes` bytes an element (4, or 2: 16-bit, whose plan precision
    is tf32_trunc: kernel_precision), or UnsupportedProblem (ConfigError for the configuration) naming what this kernel
    does not take and what runs it instead."""
    other = "; implicit_gemm runs any convolution"
    if element_bytes == 4 and precision != "tf32":
        raise UnsupportedProblem(f"nchw_1x1 runs precision tf32 only (it rounds the input to TF32 as cuDNN does), got "
                                 f"{precision!r}{other}")
    if (g.kh, g.kw) != (1, 1) or g.stride != (1, 1) or g.padding != (0, 0):
        raise UnsupportedProblem(f"nchw_1x1 takes a 1x1 kernel, stride 1 and padding 0, got {g.kh}x{g.kw}, stride "
                                 f"{list(g.stride)}, padding {list(g.padding)}{other}")
    if g.n > MAX_IMAGES:
        raise UnsupportedProblem(f"nchw_1x1 takes at most {MAX_IMAGES} images a call (its grid's second axis), got "
                                 f"{g.n}{other}")
    check_meta(meta)
    hw = g.h * g.w
    cx = dict(C=g.c, HW=hw, C_OUT=g.c_out, HAS_BIAS=has_bias, OUT_CL=out_cl, X_TMA=tma_fits(hw, element_bytes),
              ROUND=element_bytes == 4, EPILOGUE=code(chain), BLOCK_M=meta.BLOCK_M, BLOCK_N=meta.BLOCK_N, BLOCK_K=meta.BLOCK_K, num_warps=meta.num_warps,
              num_stages=meta.num_stages)
    grid = (triton.cdiv(hw, meta.BLOCK_M) * triton.cdiv(g.c_out, meta.BLOCK_N), g.n)
    return LaunchPlan(grid, (g.n, g.c_out, g.h, g.w), out_cl, cx, tuple(sorted(cx.items())))


_packed = WeightCache()  # the weight as [C_out, C_in], rounded to nearest TF32 (ties to even), until it changes


def pack_weight(weight: torch.Tensor) -> torch.Tensor:
    """[C_out, C_in, 1, 1] → [C_out, C_in] contiguous, float32 rounded to nearest TF32 with ties to even."""
    w = weight.reshape(weight.shape[0], weight.shape[1])
    return round_to_tf32_even(w) if w.dtype is torch.float32 else w.contiguous()


def packed_weight(weight: torch.Tensor) -> torch.Tensor:
    return _packed.get(weight, ("nchw_1x1",), pack_weight)


def readable_input(x: torch.Tensor, plan: LaunchPlan) -> torch.Tensor:
    """The input as the kernel reads it: NCHW-contiguous, and 16-byte aligned where it goes through TMA. Any other
    input (channels_last, a view at an odd offset) is copied, inside the call."""
    x = x.contiguous()
    return x.clone() if plan.constexprs["X_TMA"] and x.data_ptr() % 16 else x


class _Address:
    """A CUDA input's address as a TMA descriptor's base: all a launch reads of it (its data pointer, and its dtype
    when the descriptor is made), so that a cached descriptor keeps no tensor alive."""

    __slots__ = ("ptr", "dtype")

    def __init__(self, ptr: int, dtype: torch.dtype) -> None:
        self.ptr, self.dtype = ptr, dtype

    def data_ptr(self) -> int:
        return self.ptr


# (address, images, C, H·W, tile) → the TMA descriptor of a CUDA input there: a descriptor is a function of these
# alone, and a layer's input often comes back at the same address (PyTorch's caching allocator), so a call then makes
# none (the host's work per call decides the contest from an idle GPU, measure/contest.py)
_descriptors: dict[tuple, Any] = {}


def _x_arg(cx: dict, x: torch.Tensor) -> Any:
    """The kernel's input argument: a TMA descriptor of x as [N, C, H·W] (X_TMA), or x."""
    if not cx["X_TMA"]:
        return x
    from triton.tools.tensor_descriptor import TensorDescriptor

    c, hw, block = cx["C"], cx["HW"], [1, cx["BLOCK_K"], cx["BLOCK_M"]]
    if x.device.type != "cuda":  # the interpreter reads the tensor itself
        return TensorDescriptor.from_tensor(x.view(x.shape[0], c, hw), block)
    key = (x.data_ptr(), x.dtype, x.shape[0], c, hw, block[1], block[2])
    desc = _descriptors.get(key)
    if desc is None:
        if len(_descriptors) >= 64:
            _descriptors.clear()
        desc = _descriptors[key] = TensorDescriptor(_Address(x.data_ptr(), x.dtype), [x.shape[0], c, hw], [c * hw, hw, 1],
                                                    block)
    return desc


def _launch(cx: dict, grid: tuple[int, int], x: torch.Tensor, wp: torch.Tensor, b: torch.Tensor, out: torch.Tensor,
            e: torch.Tensor, r: torch.Tensor, level: str) -> Any:
    return _conv2d_1x1_kernel[grid](_x_arg(cx, x), wp, b, out, e, r, **cx, LLVM_OPT=level)


_binaries = BoundLaunches("nchw_1x1", lambda: _conv2d_1x1_kernel, 6)


def run(plan: LaunchPlan, x: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor],
        out: torch.Tensor, epilogue: Epilogue = NO_EPILOGUE) -> tuple[Any, str]:
    """Launch a plan on tensors that match it (`x` as readable_input makes it, `out` in the plan's layout, `epilogue`
    the plan's chain). Returns the compiled kernel and the LLVM level it was compiled at (kernels/llvm_opt)."""
    wp = packed_weight(weight)
    b = bias if bias is not None else out  # not read without a bias (HAS_BIAS)
    e = epilogue.vectors if epilogue.vectors is not None else out  # not read without a chain that uses them
    r = epilogue.residual_as(plan.out_cl) if epilogue.residual is not None else out
    cx = plan.constexprs
    if x.device.type != "cuda":  # the interpreter compiles nothing
        return _launch(cx, plan.grid, x, wp, b, out, e, r, "none"), "none"
    return _binaries.run(alignment_key(plan.binary_key, x.device, x, b, out, e, r), plan.grid,
                         (_x_arg(cx, x), wp, b, out, e, r), cx,
                         lambda lvl: _right_at(lvl, plan, x, weight, bias, out, epilogue),
                         lambda lvl: _launch(cx, plan.grid, x, wp, b, out, e, r, lvl))


def _right_at(level: str, plan: LaunchPlan, x: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor],
              out: torch.Tensor, epilogue: Epilogue = NO_EPILOGUE) -> bool:
    """Compile the binary at `level` and run it on one image (the batch is the grid's, not the binary's) against
    float64, with its epilogue (kernels/llvm_opt.py: why)."""
    cx = plan.constexprs
    c_out, h, w = plan.out_shape[1:]
    t = one_image(x, weight, bias, out, (cx["C"], h, w), False, (c_out, h, w), plan.out_cl, 20261123)
    ep = check_epilogue(epilogue, t.out)
    with llvm_opt.compiling_at(level):
        _launch(cx, (plan.grid[0], 1), t.x, pack_weight(t.weight), t.bias if t.bias is not None else t.out, t.out,
                ep.vectors if ep.vectors is not None else t.out, ep.residual if ep.residual is not None else t.out,
                level)
    return agrees(t.out, t.x, t.weight, t.bias, (1, 1), (0, 0), (1, 1), "tf32", ep)


def _plan(x: torch.Tensor, g: ConvGeometry, has_bias: bool, meta: Meta, precision: str, out_cl: bool,
          chain: tuple[str, ...] = ()) -> LaunchPlan:
    return make_plan(g, has_bias, meta, precision, out_cl, x.element_size(), chain)


HOST = Host(_plan, readable_input, run, dtypes=DTYPES, epilogues=POINTWISE_OPS)
launch, prepared = HOST.launch, HOST.prepared


def default_meta(out_channels: int, stride_w: int, width: int, precision: str = "tf32") -> Meta:
    """One class: resnet50_layer1_1x1's best on the H200 (0.0698 ms; M64-N64-K64-w4-s2 0.0699, M128-N64-K64-w8-s3
    0.0708)."""
    return Meta(BLOCK_M=64, BLOCK_N=64, BLOCK_K=32, num_warps=4, num_stages=3)


# identity (kernels/identity.py): bump VERSION on a deliberate change of the host's numerics
VERSION = 1
SOURCE = KernelSource(VERSION, (_conv2d_1x1_kernel, round_tf32_even_bits, round_tf32_even_ptx))
# e71a7300b70a: the same kernel before it took an epilogue (a binary without one computes as it did)
PREVIOUS_SOURCE_HASHES = ("439865208f23", "3e258e020276", "e71a7300b70a")



def draw_case(rng: random.Random, small: bool) -> dict[str, Any]:
    """verify's case draw (convtune.commands.verify): a case in nchw_1x1's family (kernels/variants/nchw_1x1.make_plan): a 1×1 kernel, stride 1, no padding, any dilation;
    1-512 input and output channels (log-uniform), sizes whose H·W is a multiple of 4 (TMA) or not, batch 1-16; the
    default configuration or a random one that fits shared memory."""
    c, k = (rng.randint(1, 24), rng.randint(1, 40)) if small else (log_uniform_int(rng, 1, 512), log_uniform_int(rng, 1, 512))
    h, w = (rng.randint(1, 9), rng.randint(1, 9)) if small else (rng.randint(1, 80), rng.randint(1, 80))
    n = rng.randint(1, 2) if small else rng.choice([1, 1, 2, 3, 4, 8, 16])
    meta = None
    if rng.random() >= 0.3:
        while True:
            meta = dict(BLOCK_M=64 if small else rng.choice([64, 128, 256]), BLOCK_N=rng.choice([16, 32, 64]),
                        BLOCK_K=16 if small else rng.choice([16, 32, 64]), num_warps=rng.choice([4, 8]),
                        num_stages=rng.choice([1, 2, 3, 4]))
            if (meta["BLOCK_M"] + meta["BLOCK_N"]) * meta["BLOCK_K"] * 4 * meta["num_stages"] <= 160 * 1024:
                break
    dh, dw = rng.choice([1, 1, 1, 2, 3]), rng.choice([1, 1, 1, 2, 3])
    return dict(n=n, c=c, h=h, w=w, k=k, kh=1, kw=1, stride=(1, 1), padding=(0, 0), dilation=(dh, dw),
                bias=rng.random() < 0.7, offset=rng.choice([0, 0, 1, 2, 3]), init=rng.choice(["rand", "randn"]),
                meta=meta, seed=rng.randrange(2**31), layout=rng.choice(["nchw", "channels_last"]))


register(KernelVariant(
    name="nchw_1x1", launch=launch, prepared=prepared, library=HOST, default_meta=default_meta, source=SOURCE,
    previous_hashes=PREVIOUS_SOURCE_HASHES, tf32_ties=TF32_TIES, entry_points=("_conv2d_1x1_kernel",),
    restricted_to=RESTRICTED_TO, draw_case=draw_case, precisions=PRECISIONS,
    compute_capability=CVT_RN_TF32_CAPABILITY, space=SPACE))
