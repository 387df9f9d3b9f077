"""`nhwc_streamk`: `nhwc_preround`'s GEMM with a part-empty last wave shared along K.

The nhwc kernels run one program a tile, so a batch runs in waves of (SMs × programs an SM), and their time steps
with whole waves: on the H200 alexnet_conv5's 338 tiles of
128 × 256 fill 2.56 waves of one program an SM, and the 56 %-full third wave costs a whole one. Here the programs
below DP_TILES run one tile each, as nhwc_igemm's do, and the last SK_WORKERS programs share the K steps of the
last SK_TILES tiles (the last full wave and the rest) in equal runs (stream-K): a worker's run covers whole tiles and
parts of at most two. A part is stored to a workspace; the last part of a tile to arrive (an atomic count) sums the
parts in worker order, so the sum does not depend on which arrives last, and writes the tile.

What keeps it right (each found on the H200):
- the input is rounded to nearest TF32 before the kernel (as nhwc_preround's is), so A goes from shared memory
  straight into the MMA: split sums came out wrong, differently each launch, only with A rounded in the
  kernel (M64-N256-w4-s3), the family that also gave wrong sums unsplit on K loops shorter than num_stages
  (meta.safe_stages);
- the runs are cut in grains of num_stages K steps (a tile's last grain takes the remainder), so that no part's
  pipelined K loop runs fewer than num_stages steps;
- a CTA barrier before each part, so that a part's loads into the pipeline's shared memory never overtake a warp
  still reading the previous tile's store, whose layout change uses the same shared memory (found in the PTX).

When it splits: only where a program holds an SM alone (the driver's occupancy for the binary is 1), and the last
wave is under SPLIT_BELOW full. With the split in the one kernel, alexnet_conv5 at M128-N256-w8-s4 (one
program an SM) went 0.2354 → 0.2214 ms (its NCHW route 0.885x → 0.928x cuDNN's faster layout) and alexnet_conv2
0.7331 → 0.6619; at two programs an SM conv4 went 3.8 % slower and conv3 7.1 % (a lone program in a part-empty wave
runs faster than the wave model says). Elsewhere the binary runs every tile whole. As a kernel of its own after the
whole tiles the split gains 1.3 % on conv5: the second launch waits for the first's last wave. This kernel, against
nhwc_preround at the same tile: alexnet_conv5 NCHW 0.2766 →
0.2682 ms, alexnet_conv2 -6 to -8 %; alexnet_conv3/conv4 at M128-N256 (1.12 waves split) 4-7 % slower, and at
M128-N128-w8-s3, whose binary here holds an SM alone, 15-28 % slower: a pin decides per key.

The K loop is nhwc_igemm's (nhwc_tiles._tile_sum; nhwc_igemm keeps its own copy, so that the pinned nhwc binaries
stay the ones they were measured with). The GPU check: tests/gpu_scripts/nhwc_streamk.py.
"""

from __future__ import annotations

import ctypes
import warnings
from dataclasses import dataclass
from typing import Any, Optional

import torch
import triton
import triton.language as tl

from convtune.errors import UnsupportedProblem
from convtune.kernels import layout, llvm_opt
from convtune.kernels.base import KernelVariant, register
from convtune.kernels.host import BoundLaunches, Host, alignment_key, one_image
from convtune.kernels.identity import KernelSource
from convtune.kernels.conv_args import ConvGeometry
from convtune.kernels.meta import Meta, safe_stages
from convtune.kernels.nhwc_tiles import (GROUP_M, TF32_TIES, _store_tile, _tile_at, _tile_sum, default_meta_preround,
                                         pack_weight, packed_weight, tma_fits, weight_arg)
from convtune.kernels.layout import to_channels_last
from convtune.kernels.precision import (CVT_RN_TF32_CAPABILITY, dot_precision, round_tf32_even_bits, round_tf32_even_ptx, round_to_tf32_even,
                                        rounds_operands)
from convtune.kernels.selfcheck import agrees

__all__ = ["TF32_TIES", "default_meta", "launch", "prepared"]

# A last wave at least this full runs as it is (the probe split the last wave under 0.9 full; not tuned further)
SPLIT_BELOW = 0.9
MAX_PARTS = 4  # workers a split tile at most, where the tiles are fewer than the programs the GPU runs at once


@triton.jit
def _owner(grain, total, workers):
    """The worker whose run holds split grain `grain` (runs: worker w has grains w·total // workers up to the next's)."""
    return ((grain + 1) * workers - 1) // total


# M and the schedule are not specialised: one binary for every batch and split, which the one-time check (batch 1,
# both paths: check_schedule) checks
@triton.jit(do_not_specialize=["M", "DP_TILES", "SK_TILES", "SK_WORKERS"])
def _conv2d_nhwc_streamk_kernel(
    x_ptr, w_ptr, b_ptr, y_ptr,  # w_ptr: the packed weight, or a TMA descriptor of it as [C_OUT, K] (W_TMA)
    ws_ptr, cnt_ptr,  # partial tiles, 2 a worker, and an arrival count a split tile, zero between launches
    M, DP_TILES, SK_TILES, SK_WORKERS,  # output rows; the schedule (split_schedule)
    C: tl.constexpr, H: tl.constexpr, W: tl.constexpr, C_OUT: tl.constexpr, OH: tl.constexpr, OW: tl.constexpr,
    KH: tl.constexpr, KW: tl.constexpr, SH: tl.constexpr, SW: tl.constexpr, PH: tl.constexpr, PW: tl.constexpr,
    DH: tl.constexpr, DW: tl.constexpr,
    HAS_BIAS: tl.constexpr, PRECISION: tl.constexpr, OUT_CL: tl.constexpr, W_TMA: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP: tl.constexpr, GRAIN: tl.constexpr,
    GRAINS: tl.constexpr,  # grains a tile (grains_per_tile)
    LLVM_OPT: tl.constexpr,  # unused in the body: keys the compile cache by kernels.llvm_opt's level
):
    """Programs below DP_TILES: one tile each. The SK_WORKERS after them share the last SK_TILES tiles' grains (a
    tile's K steps in runs of GRAIN, its last grain taking the remainder) in equal runs of consecutive grains."""
    pid = tl.program_id(0)
    C_BLOCKS: tl.constexpr = (C + BLOCK_K - 1) // BLOCK_K
    STEPS: tl.constexpr = KH * KW * C_BLOCKS  # K steps a tile
    if pid < DP_TILES:
        pid_m, pid_n = _tile_at(pid, M, C_OUT, BLOCK_M, BLOCK_N, GROUP)
        acc = _tile_sum(x_ptr, w_ptr, pid_m, pid_n, M, 0, STEPS, C, H, W, C_OUT, OH, OW, KH, KW, SH, SW, PH, PW, DH,
                        DW, PRECISION, W_TMA, BLOCK_M, BLOCK_N, BLOCK_K)
        _store_tile(acc, b_ptr, y_ptr, pid_m, pid_n, M, C_OUT, OH * OW, HAS_BIAS, OUT_CL, BLOCK_M, BLOCK_N)
    else:
        worker = pid - DP_TILES
        total = SK_TILES * GRAINS
        g = worker * total // SK_WORKERS
        end = (worker + 1) * total // SK_WORKERS
        first = g
        offs = tl.arange(0, BLOCK_M)[:, None] * BLOCK_N + tl.arange(0, BLOCK_N)[None, :]
        while g < end:
            tl.debug_barrier()  # the previous tile's store (its layout change uses the pipeline's shared memory) done
            split_tile = g // GRAINS
            j_lo = g % GRAINS
            j_hi = tl.minimum(GRAINS, j_lo + (end - g))
            k_hi = tl.where(j_hi == GRAINS, STEPS, j_hi * GRAIN)
            tile = DP_TILES + split_tile
            pid_m, pid_n = _tile_at(tile, M, C_OUT, BLOCK_M, BLOCK_N, GROUP)
            acc = _tile_sum(x_ptr, w_ptr, pid_m, pid_n, M, j_lo * GRAIN, k_hi, C, H, W, C_OUT, OH, OW, KH, KW, SH,
                            SW, PH, PW, DH, DW, PRECISION, W_TMA, BLOCK_M, BLOCK_N, BLOCK_K)
            if (j_lo == 0) & (j_hi == GRAINS):  # a whole tile
                _store_tile(acc, b_ptr, y_ptr, pid_m, pid_n, M, C_OUT, OH * OW, HAS_BIAS, OUT_CL, BLOCK_M, BLOCK_N)
            else:  # slot 0: the part that opens this worker's run; 1: the part that closes it
                slot = worker * 2 + (g != first).to(tl.int32)
                tl.store(ws_ptr + slot.to(tl.int64) * (BLOCK_M * BLOCK_N) + offs, acc)
                tl.debug_barrier()  # every thread's part stored before the arrival is counted
                tile_lo = split_tile * GRAINS
                w_first = _owner(tile_lo, total, SK_WORKERS)
                w_last = _owner(tile_lo + GRAINS - 1, total, SK_WORKERS)
                arrived = tl.atomic_add(cnt_ptr + split_tile, 1, sem="acq_rel")
                # one thread adds and the others read its result from shared memory: a warp ahead must not overwrite
                # that word before a warp behind has read it
                tl.debug_barrier()
                if arrived == w_last - w_first:  # the others' parts are all stored
                    tile_acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
                    for w in range(w_first, w_last + 1):
                        opened_before = (w * total // SK_WORKERS < tile_lo).to(tl.int32)  # its closing part
                        tile_acc += tl.load(ws_ptr + (w * 2 + opened_before).to(tl.int64) * (BLOCK_M * BLOCK_N)
                                            + offs, cache_modifier=".cg")  # from L2: other SMs wrote them
                    tl.store(cnt_ptr + split_tile, 0)  # zero for the next launch
                    _store_tile(tile_acc, b_ptr, y_ptr, pid_m, pid_n, M, C_OUT, OH * OW, HAS_BIAS, OUT_CL, BLOCK_M,
                                BLOCK_N)
            g += j_hi - j_lo


@dataclass(frozen=True)
class Schedule:
    """Which tiles run whole, one a program, and which the last programs (workers) share along K."""

    dp_tiles: int
    sk_tiles: int = 0
    workers: int = 0

    @property
    def grid(self) -> tuple[int]:
        return (self.dp_tiles + self.workers,)


def grains_per_tile(steps: int, grain: int) -> int:
    """A tile's K steps in grains of `grain` (the kernel's GRAINS): the last grain takes the remainder."""
    return max(steps // grain, 1)


def split_schedule(tiles: int, steps: int, grain: int, slots: Optional[int]) -> Schedule:
    """The schedule for `tiles` of `steps` K steps on a GPU that runs `slots` programs at once: whole tiles, one a
    program, but for a last wave under SPLIT_BELOW full: then the last full wave and the rest are shared by as many
    workers as the GPU runs at once (with fewer tiles than that, at most MAX_PARTS a tile), each a run of grains
    equal within one. `slots` None: no split."""
    grains = grains_per_tile(steps, grain)
    if not slots or slots <= 0 or tiles <= 0 or grains < 2:
        return Schedule(tiles)
    full, rest = divmod(tiles, slots)
    if rest == 0 or rest >= SPLIT_BELOW * slots:
        return Schedule(tiles)
    dp = max(full - 1, 0) * slots
    sk = tiles - dp
    workers = min(slots, sk * MAX_PARTS if full == 0 else slots, sk * grains)
    return Schedule(dp, sk, workers)


def check_schedule(tiles: int, steps: int, grain: int) -> Schedule:
    """The one-time check's schedule (_right_at runs the binary on one image): the back half of its tiles shared by
    half as many workers again, so that the check runs both paths and tiles of two parts or more (where a tile has
    two grains or more; else every tile whole)."""
    grains = grains_per_tile(steps, grain)
    if grains < 2:
        return Schedule(tiles)
    sk = max(tiles - tiles // 2, 1)
    return Schedule(tiles - sk, sk, min(sk + sk // 2 + 1, sk * grains))


def resident_programs(compiled: Any) -> Optional[int]:
    """How many programs of a compiled binary an SM runs at once: the driver's occupancy for its block size and
    shared memory (cuOccupancyMaxActiveBlocksPerMultiprocessor). None where the driver cannot say."""
    try:
        cuda = ctypes.CDLL("libcuda.so.1")
        compiled._init_handles()  # loads the binary: its function handle
        blocks = ctypes.c_int(0)
        err = cuda.cuOccupancyMaxActiveBlocksPerMultiprocessor(
            ctypes.byref(blocks), ctypes.c_void_p(compiled.function), ctypes.c_int(32 * compiled.metadata.num_warps),
            ctypes.c_size_t(compiled.metadata.shared))
    except (OSError, AttributeError) as e:
        warnings.warn(f"nhwc_streamk: the binary's occupancy is unknown ({type(e).__name__}: {e}); it runs unsplit",
                      RuntimeWarning, stacklevel=2)
        return None
    return blocks.value if err == 0 and blocks.value > 0 else None


def split_slots(per_sm: Optional[int], sms: int) -> Optional[int]:
    """The workers a split may use: the GPU's SMs where one program holds an SM alone; None (no split) where two or
    more share one, or the occupancy is unknown (the module's doc: the split was slower at two an SM)."""
    return sms if per_sm == 1 else None


@dataclass(frozen=True)
class LaunchPlan:
    """Everything a launch needs that depends only on shapes and configuration."""

    m: int  # output rows, N·OH·OW
    tiles: int
    steps: int  # K steps a tile
    out_shape: tuple[int, int, int, int]
    rounds: bool  # tf32: the input and the weight are rounded to nearest TF32 before the kernel
    out_cl: bool  # writes a channels_last output
    slots: Optional[int]  # the split's workers; None: as split_slots says for the binary and the GPU (run)
    constexprs: dict
    binary_key: tuple


def make_plan(g: ConvGeometry, has_bias: bool, meta: Meta, precision: str, out_cl: bool = True,
              slots: Optional[int] = None) -> LaunchPlan:
    """The plan of a launch. The weight comes through TMA where its rows allow one (nhwc_igemm.tma_fits), as
    nhwc_igemm's pins do on the layers this variant is for. `slots`: the split's workers, for tests and probes (the
    interpreter splits nothing unless given them)."""
    m = g.n * g.oh * g.ow
    if m * g.c_out >= 2**31:
        raise UnsupportedProblem(f"the output has {m * g.c_out} elements; int32 indexing allows < 2**31")
    steps = g.kh * g.kw * triton.cdiv(g.c, meta.BLOCK_K)
    stages = safe_stages(meta.num_stages, steps)  # the unsplit tiles' loop (the parts' are never that short)
    grain = stages
    cx = dict(C=g.c, H=g.h, W=g.w, C_OUT=g.c_out, OH=g.oh, OW=g.ow, KH=g.kh, KW=g.kw, SH=g.stride[0],
              SW=g.stride[1], PH=g.padding[0], PW=g.padding[1], DH=g.dilation[0], DW=g.dilation[1],
              HAS_BIAS=has_bias, PRECISION=dot_precision(precision), OUT_CL=out_cl, W_TMA=tma_fits(g.c),
              BLOCK_M=meta.BLOCK_M, BLOCK_N=meta.BLOCK_N, BLOCK_K=meta.BLOCK_K, GROUP=GROUP_M, GRAIN=grain,
              GRAINS=grains_per_tile(steps, grain), num_warps=meta.num_warps, num_stages=stages)
    tiles = triton.cdiv(m, meta.BLOCK_M) * triton.cdiv(g.c_out, meta.BLOCK_N)
    return LaunchPlan(m, tiles, steps, (g.n, g.c_out, g.oh, g.ow), rounds_operands(precision), out_cl, slots, cx,
                      tuple(sorted(cx.items())))


def kernel_input(x: torch.Tensor, plan: LaunchPlan) -> torch.Tensor:
    """The input as the kernel reads it: channels_last-contiguous, rounded to nearest TF32 for tf32 (an NCHW input
    in its copy to channels_last, a channels_last one by a pass of its own: layout.to_channels_last)."""
    return to_channels_last(x, round_to_nearest_tf32=plan.rounds)


def run(plan: LaunchPlan, x: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor],
        out: torch.Tensor) -> tuple[Any, str]:
    """Launch a plan on tensors that match it (`x` as kernel_input makes it, `out` in the plan's layout). Returns
    the compiled kernel and the LLVM level it was compiled at (kernels/llvm_opt)."""
    cx = plan.constexprs
    wp = packed_weight(weight, plan.rounds)
    b = bias if bias is not None else x
    if x.device.type != "cuda":  # the interpreter compiles nothing
        sched = split_schedule(plan.tiles, plan.steps, cx["GRAIN"], plan.slots)
        return _launch(cx, sched, x, wp, b, out, plan.m, "none"), "none"
    key = alignment_key(plan.binary_key, x.device, x, b, out)
    binary = _binaries.get((key, plan.m, plan.slots))
    if binary is not None:  # this binary and schedule have run for these alignments: launch past Triton's dispatch
        binary.launch(*_args(cx, binary.extra, x, wp, b, out, plan.m))
        return binary.compiled, binary.level
    chosen: list[Schedule] = []

    def launch_at(level: str) -> Any:
        """Compile, pick the schedule from the binary's residency (unless the plan names its slots), and launch."""
        compiled = _conv2d_nhwc_streamk_kernel.warmup(*_args(cx, Schedule(1), x, wp, b, out, 1), grid=(1,), **cx,
                                                      LLVM_OPT=level)
        slots = plan.slots
        if slots is None:
            sms = torch.cuda.get_device_properties(x.device).multi_processor_count
            slots = split_slots(resident_programs(compiled), sms)
        chosen.append(split_schedule(plan.tiles, plan.steps, cx["GRAIN"], slots))
        return _launch(cx, chosen[0], x, wp, b, out, plan.m, level)
    binary = _binaries.first_launch(key, (key, plan.m, plan.slots), lambda: chosen[0].grid, cx,
                                    lambda lvl: _right_at(lvl, plan, x, weight, bias, out), launch_at,
                                    extra=lambda: chosen[0])
    return binary.compiled, binary.level


# (binary key, device, alignments; rows, slots) → the binary, bound, with its schedule: later calls go past Triton's
# per-call dispatch (runner.bound_runner), as nhwc_igemm's do
_binaries = BoundLaunches("nhwc_streamk", lambda: _conv2d_nhwc_streamk_kernel, 10)
# (device, stream) → (partial tiles, arrival counts), grown as needed. The counts start at zero and every launch
# leaves them zero; one pair a stream, so that launches on two streams never share one
_workspaces: dict[tuple, tuple[torch.Tensor, torch.Tensor]] = {}


def _workspace(device: torch.device, sched: Schedule, cx: dict) -> tuple[torch.Tensor, torch.Tensor]:
    """The split's workspace for a schedule: two partial tiles a worker and an arrival count a split tile."""
    key = (device, torch.cuda.current_stream(device).cuda_stream if device.type == "cuda" else 0)
    ws, cnt = _workspaces.get(key, (None, None))
    need = (max(sched.workers, 1) * 2 * cx["BLOCK_M"] * cx["BLOCK_N"], max(sched.sk_tiles, 1))
    if ws is None or ws.numel() < need[0] or cnt.numel() < need[1]:
        ws = torch.empty(max(need[0], 0 if ws is None else ws.numel()), device=device, dtype=torch.float32)
        cnt = torch.zeros(max(need[1], 0 if cnt is None else cnt.numel()), device=device, dtype=torch.int32)
        _workspaces[key] = (ws, cnt)
    return ws, cnt


def _args(cx: dict, sched: Schedule, x: torch.Tensor, wp: torch.Tensor, b: torch.Tensor, out: torch.Tensor,
          m: int) -> tuple:
    """The kernel's runtime arguments, in its order."""
    ws, cnt = _workspace(x.device, sched, cx)
    return (x, weight_arg(cx, wp), b, out, ws, cnt, m, sched.dp_tiles, sched.sk_tiles, sched.workers)


def _launch(cx: dict, sched: Schedule, x: torch.Tensor, wp: torch.Tensor, b: torch.Tensor, out: torch.Tensor, m: int,
            level: str) -> Any:
    return _conv2d_nhwc_streamk_kernel[sched.grid](*_args(cx, sched, x, wp, b, out, m), **cx, LLVM_OPT=level)


def _right_at(level: str, plan: LaunchPlan, x: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor],
              out: torch.Tensor) -> bool:
    """Compile the binary at `level` and run it twice on one image against float64 (kernels/llvm_opt.py: why):
    every tile whole, then split as check_schedule says, so that each of the kernel's two paths runs on every tile
    position (an LLVM miscompile is of a path's index logic: on the H200, checked with the split alone, a binary whose
    one tile at batch 1 ran only the split path passed and was wrong on a batch of 4; with the whole-tile pass it is
    recompiled at O0)."""
    cx = plan.constexprs
    tiles = triton.cdiv(cx["OH"] * cx["OW"], cx["BLOCK_M"]) * triton.cdiv(cx["C_OUT"], cx["BLOCK_N"])
    chw_in, chw_out = (cx["C"], cx["H"], cx["W"]), (cx["C_OUT"], cx["OH"], cx["OW"])
    # (one pass where the check's schedule splits nothing: a tile of one grain)
    for sched in dict.fromkeys((Schedule(tiles), check_schedule(tiles, plan.steps, cx["GRAIN"]))):
        t = one_image(x, weight, bias, out, chw_in, True, chw_out, cx["OUT_CL"], 20261123)  # fresh NaNs a pass
        if plan.rounds:  # as the real input is: the kernel does not round it
            t.x.copy_(round_to_tf32_even(t.x))
        with llvm_opt.compiling_at(level):
            _launch(cx, sched, t.x, pack_weight(t.weight, plan.rounds), t.bias if t.bias is not None else t.x, t.out,
                    cx["OH"] * cx["OW"], level)
        if not agrees(t.out, t.x, t.weight, t.bias, (cx["SH"], cx["SW"]), (cx["PH"], cx["PW"]), (cx["DH"], cx["DW"]),
                      cx["PRECISION"]):
            return False
    return True


def _plan(x: torch.Tensor, g: Any, has_bias: bool, meta: Meta, precision: str, out_cl: bool,
          slots: Optional[int] = None) -> LaunchPlan:
    return make_plan(g, has_bias, meta, precision, out_cl, slots)


# `slots` (make_plan) is a launch option: launch(..., slots=2)
HOST = Host(_plan, kernel_input, run, channels_last=True)
launch, prepared = HOST.launch, HOST.prepared


def default_meta(out_channels: int, stride_w: int, width: int, precision: str = "tf32") -> Meta:
    """nhwc_preround's defaults (nhwc_igemm.default_meta_preround): for 192-256 output channels M128-N256-w8-s4, a
    binary that holds an SM alone, where the split runs; elsewhere two or more programs share an SM and it does not."""
    return default_meta_preround(out_channels, stride_w, width, precision)


# identity (kernels/identity.py): bump VERSION on a deliberate change of the host's numerics
VERSION = 1
SOURCE = KernelSource(VERSION, (_conv2d_nhwc_streamk_kernel, layout._nchw_to_nhwc_kernel, layout._round_tf32_kernel,
                                round_tf32_even_bits, round_tf32_even_ptx))
PREVIOUS_SOURCE_HASHES = ("d2064b641f81",)


register(KernelVariant(
    name="nhwc_streamk", launch=launch, prepared=prepared, library=HOST, default_meta=default_meta,
    source=SOURCE, previous_hashes=PREVIOUS_SOURCE_HASHES, tf32_ties=TF32_TIES,
    entry_points=("_conv2d_nhwc_streamk_kernel",), compute_capability=CVT_RN_TF32_CAPABILITY))
