"""`nhwc_split_n`: `nhwc_preround`'s GEMM with the output channels in two launches, whole
BLOCK_N-wide tiles on the call's stream and the channels left over in narrower tiles beside them on a second stream.

Why: a 128 × 256 tile at one program an SM does the same work as two 128 × 128 tiles at two an SM 13 % faster (0.0787
against 0.0909 ms a wave at K 3456 on the H200), but 384 output channels
(alexnet_conv3/conv4) are one and a half 256-wide tiles, and a 256-wide tile over the last 128 wastes half its MMAs.
Here the first C_OUT // BLOCK_N · BLOCK_N channels run in the configuration's tiles and the rest in REST_TILE's; the
second launch fills the SMs the first's last wave leaves, so the two run as one wave pattern. On alexnet_conv4,
M128-N256-w8-s4 with the 128 channels left over at M128-N128-w4-s3 takes
0.3416 ms against 0.3657 for M128-N128-w4-s3 over all 384 (kernels alone, channels_last, H200), and 0.4023 ms
with both launches on one stream: the second stream is what pays.

One launch with a tile kind a branch does not fit: Triton 3.6 gives each branch's pipeline its own shared memory
(393,280 bytes for two M128-N256-s4 loops). Each launch is a binary of its own, checked once (kernels/llvm_opt).
The input is rounded to nearest TF32 before the kernels, as nhwc_preround's, and each tile's sum is nhwc_streamk's
(_tile_sum: the K loop of nhwc_igemm), so the output is bit for bit nhwc_preround's at the same K step.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any, Optional

import torch
import triton
import triton.language as tl

from convtune.errors import UnsupportedProblem
from convtune.kernels import layout, llvm_opt
from convtune.kernels.base import KernelVariant, register
from convtune.kernels.host import BoundLaunches, Host, alignment_key, one_image, without_input
from convtune.kernels.identity import KernelSource
from convtune.kernels.conv_args import ConvGeometry
from convtune.kernels.meta import Meta, safe_stages
from convtune.kernels.layout import to_channels_last
from convtune.kernels.nhwc_tiles import (GROUP_M, TF32_TIES, _store_tile, _tile_at, _tile_sum, default_meta_preround,
                                         pack_weight, packed_weight, tma_fits, weight_arg)
from convtune.kernels.precision import (CVT_RN_TF32_CAPABILITY, dot_precision, round_tf32_even_bits, round_tf32_even_ptx, round_to_tf32_even,
                                        rounds_operands)
from convtune.kernels.selfcheck import agrees

__all__ = ["TF32_TIES", "default_meta", "launch", "prepared"]

# The tile of the channels left over (C_OUT % BLOCK_N), at most 128 wide: with alexnet_conv4's 256-wide tiles at
# M128-N256-w8-s4, its 128 channels left over took 0.3416 ms at M128-N128-w4-s3 (two programs an SM) and 0.3963 at
# M64-N128-w4-s3 (three an SM), both on a stream of their own (H200).
REST_TILE = Meta(BLOCK_M=128, BLOCK_N=128, BLOCK_K=32, num_warps=4, num_stages=3)


@triton.jit(do_not_specialize=["M"])  # one binary for every batch: the one-time check (batch 1) checks it
def _conv2d_nhwc_split_n_kernel(
    x_ptr, w_ptr, b_ptr, y_ptr, M,  # w_ptr: the packed weight, or a TMA descriptor of it as [C_OUT, K] (W_TMA)
    C: tl.constexpr, H: tl.constexpr, W: tl.constexpr, C_OUT: tl.constexpr, OH: tl.constexpr, OW: tl.constexpr,
    KH: tl.constexpr, KW: tl.constexpr, SH: tl.constexpr, SW: tl.constexpr, PH: tl.constexpr, PW: tl.constexpr,
    DH: tl.constexpr, DW: tl.constexpr,
    HAS_BIAS: tl.constexpr, PRECISION: tl.constexpr, OUT_CL: tl.constexpr, W_TMA: tl.constexpr,
    N_FROM: tl.constexpr, N_COUNT: tl.constexpr,  # this launch's channels: N_FROM (a multiple of BLOCK_N) and on
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP: tl.constexpr,
    LLVM_OPT: tl.constexpr,  # unused in the body: keys the compile cache by kernels.llvm_opt's level
):
    """One program a tile of channels N_FROM .. N_FROM + N_COUNT - 1, in nhwc_igemm's tile order."""
    C_BLOCKS: tl.constexpr = (C + BLOCK_K - 1) // BLOCK_K
    pid_m, pid_n = _tile_at(tl.program_id(0), M, N_COUNT, BLOCK_M, BLOCK_N, GROUP)
    pid_n += N_FROM // BLOCK_N
    acc = _tile_sum(x_ptr, w_ptr, pid_m, pid_n, M, 0, KH * KW * C_BLOCKS, C, H, W, C_OUT, OH, OW, KH, KW, SH, SW, PH,
                    PW, DH, DW, PRECISION, W_TMA, BLOCK_M, BLOCK_N, BLOCK_K)
    _store_tile(acc, b_ptr, y_ptr, pid_m, pid_n, M, C_OUT, OH * OW, HAS_BIAS, OUT_CL, BLOCK_M, BLOCK_N)


@dataclass(frozen=True)
class Part:
    """One launch: its channels, its tile and everything it compiles with."""

    n_from: int
    n_count: int
    meta: Meta
    rounds: bool  # the input and the weight rounded to nearest TF32 before the kernel (tf32)
    grid: tuple[int]
    constexprs: dict
    binary_key: tuple


@dataclass(frozen=True)
class LaunchPlan:
    """Everything a launch needs that depends only on shapes and configuration."""

    m: int  # output rows, N·OH·OW
    out_shape: tuple[int, int, int, int]
    rounds: bool  # tf32: the input and the weight are rounded to nearest TF32 before the kernels
    out_cl: bool  # writes a channels_last output
    parts: tuple[Part, ...]  # one or two: the whole tiles, then the channels left over (on a second stream)


def rest_tile(rest: int, main: Meta) -> Meta:
    """The tile of the `rest` channels left over: REST_TILE, no wider than the smallest power of two that covers
    them (16 at least, tl.dot's smallest N), and with the configuration's K step."""
    width = min(REST_TILE.BLOCK_N, max(16, triton.next_power_of_2(rest)))
    return Meta(REST_TILE.BLOCK_M, width, main.BLOCK_K, REST_TILE.num_warps, REST_TILE.num_stages)


def split_channels(c_out: int, meta: Meta) -> list[tuple[int, int, Meta]]:
    """(first channel, channels, tile) of each launch: the whole BLOCK_N-wide tiles, then what is left over in
    rest_tile's (only that where C_OUT < BLOCK_N; only the first where BLOCK_N divides C_OUT)."""
    whole = c_out // meta.BLOCK_N * meta.BLOCK_N
    parts = [(0, whole, meta)] if whole else []
    if c_out > whole:
        parts.append((whole, c_out - whole, rest_tile(c_out - whole, meta)))
    return parts


def make_plan(g: ConvGeometry, has_bias: bool, meta: Meta, precision: str, out_cl: bool = True) -> LaunchPlan:
    """The plan of a launch. The weight comes through TMA where its rows allow one (nhwc_igemm.tma_fits)."""
    m = g.n * g.oh * g.ow
    if m * g.c_out >= 2**31:
        raise UnsupportedProblem(f"the output has {m * g.c_out} elements; int32 indexing allows < 2**31")
    parts = []
    for n_from, n_count, tile in split_channels(g.c_out, meta):
        steps = g.kh * g.kw * triton.cdiv(g.c, tile.BLOCK_K)
        cx = dict(C=g.c, H=g.h, W=g.w, C_OUT=g.c_out, OH=g.oh, OW=g.ow, KH=g.kh, KW=g.kw, SH=g.stride[0],
                  SW=g.stride[1], PH=g.padding[0], PW=g.padding[1], DH=g.dilation[0], DW=g.dilation[1],
                  HAS_BIAS=has_bias, PRECISION=dot_precision(precision), OUT_CL=out_cl, W_TMA=tma_fits(g.c),
                  N_FROM=n_from, N_COUNT=n_count, BLOCK_M=tile.BLOCK_M, BLOCK_N=tile.BLOCK_N, BLOCK_K=tile.BLOCK_K,
                  GROUP=GROUP_M, num_warps=tile.num_warps, num_stages=safe_stages(tile.num_stages, steps))
        grid = (triton.cdiv(m, tile.BLOCK_M) * triton.cdiv(n_count, tile.BLOCK_N),)
        parts.append(Part(n_from, n_count, tile, rounds_operands(precision), grid, cx, tuple(sorted(cx.items()))))
    return LaunchPlan(m, (g.n, g.c_out, g.oh, g.ow), rounds_operands(precision), out_cl, tuple(parts))


def kernel_input(x: torch.Tensor, plan: LaunchPlan) -> torch.Tensor:
    """The input as the kernels read it: channels_last-contiguous, rounded to nearest TF32 for tf32 (an NCHW input
    in its copy to channels_last, a channels_last one by a pass of its own: layout.to_channels_last)."""
    return to_channels_last(x, round_to_nearest_tf32=plan.rounds)


class _Streams(threading.local):
    """Per host thread and device: the stream the channels left over run on, and the events that fork it from the
    call's stream and join it back (made once: a new event per call, as Stream.wait_stream makes, is host time)."""

    def __init__(self) -> None:
        self.by_device: dict[int, tuple[torch.cuda.Stream, torch.cuda.Event, torch.cuda.Event]] = {}

    def get(self, device: torch.device) -> tuple[torch.cuda.Stream, torch.cuda.Event, torch.cuda.Event]:
        got = self.by_device.get(device.index)
        if got is None:
            got = self.by_device[device.index] = (torch.cuda.Stream(device), torch.cuda.Event(), torch.cuda.Event())
        return got


_streams = _Streams()


def run(plan: LaunchPlan, x: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor],
        out: torch.Tensor) -> tuple[Any, str]:
    """Launch a plan on tensors that match it (`x` as kernel_input makes it, `out` in the plan's layout): the first
    part on the call's stream, a second on a stream of its own that starts after what the call's stream has queued
    and that the call's stream then waits for, so that the call is one piece of work on its stream (CUDA graphs
    capture it as a fork and a join). Returns the first part's compiled kernel and its LLVM level
    (kernels/llvm_opt)."""
    wp = packed_weight(weight, plan.rounds)
    b = bias if bias is not None else x
    if x.device.type != "cuda":  # the interpreter: one after the other
        return [_run_part(p, x, wp, weight, bias, b, out, None) for p in plan.parts][0]
    here = torch.cuda.current_stream(x.device)
    if len(plan.parts) == 1:
        return _run_part(plan.parts[0], x, wp, weight, bias, b, out, here)
    side, forked, joined = _streams.get(x.device)
    forked.record(here)  # the input, made on the call's stream
    side.wait_event(forked)
    first = _run_part(plan.parts[0], x, wp, weight, bias, b, out, here)
    _run_part(plan.parts[1], x, wp, weight, bias, b, out, side)
    joined.record(side)  # the output whole before anything after the call on its stream
    here.wait_event(joined)
    return first


def _run_part(part: Part, x: torch.Tensor, wp: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor],
              b: torch.Tensor, out: torch.Tensor, stream: Optional[torch.cuda.Stream]) -> tuple[Any, str]:
    """One launch on `stream` (None: the interpreter's, which compiles nothing)."""
    cx = part.constexprs
    if stream is None:
        return _launch(cx, part.grid, x, wp, b, out, "none"), "none"
    key = alignment_key(part.binary_key, x.device, x, b, out)
    binary = _binaries.get((key, part.grid))
    if binary is not None:  # this binary has run for these alignments: launch it past Triton's dispatch
        binary.launch(x, _weight_desc(part.binary_key, cx, wp), b, out, _rows(x, cx), stream=stream.cuda_stream)
        return binary.compiled, binary.level
    with torch.cuda.stream(stream):
        binary = _binaries.first_launch(key, (key, part.grid), part.grid, cx,
                                        lambda lvl: _right_at(lvl, part, x, weight, bias, out),
                                        lambda lvl: _launch(cx, part.grid, x, wp, b, out, lvl))
    return binary.compiled, binary.level


# a binary's later launches go past Triton's per-call dispatch as nhwc_igemm's do, on the stream each part names
_binaries = BoundLaunches("nhwc_split_n", lambda: _conv2d_nhwc_split_n_kernel, 5)
# binary key → (packed weight, its TMA descriptor): made once while the weight is the same tensor, not on each of a
# call's two launches. One a binary, so that no more packed weights are kept alive than binaries
_descs: dict[tuple, tuple[torch.Tensor, Any]] = {}


def _weight_desc(key: tuple, cx: dict, wp: torch.Tensor) -> Any:
    """_weight_arg's descriptor (or the weight, without TMA), reused while the packed weight is the same tensor."""
    if not cx["W_TMA"]:
        return wp
    held = _descs.get(key)
    if held is None or held[0] is not wp:
        held = _descs[key] = (wp, weight_arg(cx, wp))
    return held[1]


def _rows(x: torch.Tensor, cx: dict) -> int:
    """The output rows of a launch on `x` (N·OH·OW)."""
    return x.shape[0] * cx["OH"] * cx["OW"]


def _launch(cx: dict, grid: tuple[int], x: torch.Tensor, wp: torch.Tensor, b: torch.Tensor, out: torch.Tensor,
            level: str) -> Any:
    return _conv2d_nhwc_split_n_kernel[grid](x, weight_arg(cx, wp), b, out, _rows(x, cx), **cx, LLVM_OPT=level)


def _right_at(level: str, part: Part, x: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor],
              out: torch.Tensor) -> bool:
    """Compile the part's binary at `level` and run it on one image against float64, over its own channels
    (kernels/llvm_opt.py: why)."""
    cx = part.constexprs
    t = one_image(x, weight, bias, out, (cx["C"], cx["H"], cx["W"]), True, (cx["C_OUT"], cx["OH"], cx["OW"]),
                  cx["OUT_CL"], 20261123)
    if part.rounds:  # as the real input is: the kernel does not round it
        t.x.copy_(round_to_tf32_even(t.x))
    grid = (triton.cdiv(cx["OH"] * cx["OW"], cx["BLOCK_M"]) * triton.cdiv(part.n_count, cx["BLOCK_N"]),)
    with llvm_opt.compiling_at(level):
        _launch(cx, grid, t.x, pack_weight(t.weight, part.rounds), t.bias if t.bias is not None else t.x, t.out, level)
    mine = slice(part.n_from, part.n_from + part.n_count)
    return agrees(t.out[:, mine], t.x, t.weight[mine], None if t.bias is None else t.bias[mine], (cx["SH"], cx["SW"]),
                  (cx["PH"], cx["PW"]), (cx["DH"], cx["DW"]), cx["PRECISION"])


HOST = Host(without_input(make_plan), kernel_input, run, channels_last=True)
launch, prepared = HOST.launch, HOST.prepared


def default_meta(out_channels: int, stride_w: int, width: int, precision: str = "tf32") -> Meta:
    """For more than 256 output channels that 256 does not divide (alexnet_conv3/4's 384), M128-N256-w8-s4 (the
    module's doc: alexnet_conv4 0.3416 ms with the 128 left over beside it); elsewhere nhwc_preround's default, whose
    tiles leave nothing over on the suite's layers."""
    if precision == "tf32" and out_channels > 256 and out_channels % 256:
        return Meta(BLOCK_M=128, BLOCK_N=256, BLOCK_K=32, num_warps=8, num_stages=4)
    return default_meta_preround(out_channels, stride_w, width, precision)


# identity (kernels/identity.py): bump VERSION on a deliberate change of the host's numerics
VERSION = 1
SOURCE = KernelSource(VERSION, (_conv2d_nhwc_split_n_kernel, layout._nchw_to_nhwc_kernel, layout._round_tf32_kernel,
                                round_tf32_even_bits, round_tf32_even_ptx))
PREVIOUS_SOURCE_HASHES = ("e24536d95a6e",)


register(KernelVariant(
    name="nhwc_split_n", launch=launch, prepared=prepared, library=HOST, default_meta=default_meta,
    source=SOURCE, previous_hashes=PREVIOUS_SOURCE_HASHES, tf32_ties=TF32_TIES,
    entry_points=("_conv2d_nhwc_split_n_kernel",), compute_capability=CVT_RN_TF32_CAPABILITY))
