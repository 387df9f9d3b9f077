"""Issue 13, session 16: fold_igemm's convolution written in Gluon, with the weights resident in shared memory and two
MMA warpgroups taking turns (ping-pong), fed by one TMA warp.

Why. NCU (session 15) had the convolution (0.32 ms of L1 #50's 0.40) with its L2 at 70 % of peak throughput and
L1/TEX at 73 %, the tensor pipe at 50 %. Each 128×96 output tile moves ~424 KB from L2 into shared memory: 15 K steps
of an A tile (16 KB) and a B tile (12 KB) — so the whole 184 KB weight, again for every one of the 6,400 tiles,
2.7 GB in all. L1 #50's weight, unpadded (K 432, steps of 16), is 162 KB: it fits in one SM's shared memory beside a
ring of 7 A stages of 8 KB. A persistent program per SM loads it once; a tile then moves only its A, 216 KB (-49 %).
With the SM's shared memory taken, one program runs per SM, so the epilogue (48 KB of NCHW stores a tile) is
overlapped the way CUTLASS's ping-pong kernels do it: two MMA warpgroups work on alternate tiles, one storing while
the other multiplies; a one-warp partition issues the TMA loads into a ring both consume in tile order.

Prediction (written before the first GPU run): the convolution 0.32 → 0.20-0.25 ms (L2 traffic halved; the MMA at
~70 % of the TF32 pipe would be 0.20), so the call with the tiled fold (0.08) 0.28-0.33 ms against 0.40.
Risks: 27 K steps of 16 instead of 15 of 32 (Triton's BK 16 was 2-6 % slower); the NCHW stores straight from the
MMA layout (32-byte runs); A read from shared memory by both MMAs of a step.

Output is checked against the library's (the same products; the sum order differs: K steps of 16 instead of 32, so
allclose 1e-5, not bit for bit) and against torch (the judge's allclose 1e-4).

    python benchmarks/probe_fold_gluon.py                       # the H200
    python benchmarks/probe_fold_gluon.py --batch 4 --check     # correctness alone, a small batch
    PYTHONPATH=/tmp/t36 python benchmarks/probe_fold_gluon.py --compile-only  # triton 3.6 there: compile for sm_90
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (
    fence_async_shared,
    mbarrier,
    tma,
    warpgroup_mma,
    warpgroup_mma_wait,
)

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))


@gluon.jit
def _consumer(a_bufs, w1_res, w2_res, ready, empty, wbar, turn, b_ptr, y_ptr, n_tiles, WHO: gl.constexpr,
              WF: gl.constexpr, OH: gl.constexpr, OW: gl.constexpr, C_OUT: gl.constexpr,
              TILES_PER_IMG: gl.constexpr, KSTEPS: gl.constexpr, STAGES: gl.constexpr, RINGS: gl.constexpr,
              AREG: gl.constexpr, BLOCK_M: gl.constexpr, N1: gl.constexpr, N2: gl.constexpr):
    """MMA warpgroup WHO (0 or 1): this program's tiles j = WHO, WHO + 2, ... (tile pid + j·programs).

    RINGS 1: one ring of STAGES stages, filled in tile order, and the two warpgroups take turns: one starts tile j's
    K loop once the other has had every K step of tile j - 1 (turn), so that its epilogue overlaps the other's MMAs,
    and so that no warpgroup waits on a stage's barrier more than one phase ahead of it (an mbarrier wait knows only
    the phase's parity: without the turns, warpgroup 1 waiting for step 27 on stage 6 passed on step 13's phase and
    the kernel hung). RINGS 2: a ring of STAGES/2 stages per warpgroup, each with its own TMA warp, no turns: the two
    K loops run side by side. AREG: A loaded from the stage to registers once for both MMAs (the stage freed then)."""
    mma1: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, N1, 8])
    mma2: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, N2, 8])
    SP: gl.constexpr = STAGES // RINGS
    BASE: gl.constexpr = WHO * SP * (RINGS - 1)  # ring WHO when there are two
    OHW: gl.constexpr = OH * OW
    pid = gl.program_id(0)
    nprog = gl.num_programs(0)
    mine = gl.cdiv(n_tiles - pid, nprog)
    mbarrier.wait(wbar.index(0), 0)  # the weight is resident
    for j in range(WHO, mine, 2):
        if RINGS == 1:
            mbarrier.wait(turn.index(WHO), ((j // 2) + WHO + 1) & 1, pred=j > 0)  # the other's tile j - 1 K loop
        tile = pid + j * nprog
        acc1 = gl.zeros([BLOCK_M, N1], gl.float32, mma1)
        acc2 = gl.zeros([BLOCK_M, N2], gl.float32, mma2)
        i0 = (j // RINGS) * KSTEPS  # this ring's step count before tile j
        for t in range(KSTEPS):
            i = i0 + t
            s = BASE + i % SP
            mbarrier.wait(ready.index(s), (i // SP) & 1)
            if AREG:
                a1 = a_bufs.index(s).load(gl.DotOperandLayout(operand_index=0, parent=mma1, k_width=1))
                fence_async_shared()  # the generic-proxy read before the TMA's next write
                mbarrier.arrive(empty.index(s), count=1)
                a2 = gl.convert_layout(a1, gl.DotOperandLayout(operand_index=0, parent=mma2, k_width=1))
                acc1 = warpgroup_mma(a1, w1_res.index(t).permute((1, 0)), acc1, is_async=True)
                acc2 = warpgroup_mma(a2, w2_res.index(t).permute((1, 0)), acc2, is_async=True)
                acc1, acc2, a1, a2 = warpgroup_mma_wait(2, deps=(acc1, acc2, a1, a2))
            else:
                acc1 = warpgroup_mma(a_bufs.index(s), w1_res.index(t).permute((1, 0)), acc1, is_async=True)
                acc2 = warpgroup_mma(a_bufs.index(s), w2_res.index(t).permute((1, 0)), acc2, is_async=True)
                acc1, acc2 = warpgroup_mma_wait(2, deps=(acc1, acc2))  # the previous step's MMAs are done:
                mbarrier.arrive(empty.index(BASE + (i + SP - 1) % SP), count=1, pred=t > 0)  # free its stage
        if RINGS == 1:
            mbarrier.arrive(turn.index(1 - WHO), count=1)  # every K step of tile j had: the other's turn
        acc1, acc2 = warpgroup_mma_wait(0, deps=(acc1, acc2))
        if not AREG:
            mbarrier.arrive(empty.index(BASE + (i0 + KSTEPS - 1) % SP), count=1)

        img = tile // TILES_PER_IMG
        q0 = (tile % TILES_PER_IMG) * BLOCK_M
        y_img = y_ptr + img.to(gl.int64) * (C_OUT * OHW)
        q = q0 + gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, mma1))
        p = (q // WF) * OW + q % WF
        valid = (q < OH * WF) & (q % WF < OW)
        n = gl.arange(0, N1, layout=gl.SliceLayout(0, mma1))
        v = acc1 + gl.expand_dims(gl.load(b_ptr + n, mask=n < C_OUT, other=0.0), 0)
        gl.store(y_img + gl.expand_dims(p, 1) + gl.expand_dims(n, 0) * OHW, v,
                 mask=gl.expand_dims(valid, 1) & gl.expand_dims(n < C_OUT, 0))
        q2 = q0 + gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, mma2))
        p2 = (q2 // WF) * OW + q2 % WF
        valid2 = (q2 < OH * WF) & (q2 % WF < OW)
        n2 = N1 + gl.arange(0, N2, layout=gl.SliceLayout(0, mma2))
        v2 = acc2 + gl.expand_dims(gl.load(b_ptr + n2, mask=n2 < C_OUT, other=0.0), 0)
        gl.store(y_img + gl.expand_dims(p2, 1) + gl.expand_dims(n2, 0) * OHW, v2,
                 mask=gl.expand_dims(valid2, 1) & gl.expand_dims(n2 < C_OUT, 0))


@gluon.jit
def _producer(a_desc, w1_desc, w2_desc, a_bufs, w1_res, w2_res, ready, empty, wbar, n_tiles, WHO: gl.constexpr,
              HF: gl.constexpr, WF: gl.constexpr, TILES_PER_IMG: gl.constexpr, CHUNKS: gl.constexpr,
              KSTEPS: gl.constexpr, STAGES: gl.constexpr, RINGS: gl.constexpr, BLOCK_M: gl.constexpr,
              BLOCK_K: gl.constexpr, N1: gl.constexpr):
    """A TMA warp: (WHO 0) the weight once, then its ring's tiles' A steps in order: every tile (RINGS 1) or the
    tiles of MMA warpgroup WHO (RINGS 2)."""
    SP: gl.constexpr = STAGES // RINGS
    BASE: gl.constexpr = WHO * SP
    if WHO == 0:
        mbarrier.expect(wbar.index(0), KSTEPS * (w1_desc.block_type.nbytes + w2_desc.block_type.nbytes))
        for t in range(KSTEPS):
            tma.async_copy_global_to_shared(w1_desc, [0, t * BLOCK_K], wbar.index(0), w1_res.index(t))
            tma.async_copy_global_to_shared(w2_desc, [N1, t * BLOCK_K], wbar.index(0), w2_res.index(t))
    pid = gl.program_id(0)
    nprog = gl.num_programs(0)
    mine = gl.cdiv(n_tiles - pid, nprog)
    i = 0
    for j in range(WHO, mine, RINGS):
        tile = pid + j * nprog
        r0 = (tile // TILES_PER_IMG) * (HF * WF) + (tile % TILES_PER_IMG) * BLOCK_M
        for t in range(KSTEPS):
            s = BASE + i % SP
            mbarrier.wait(empty.index(s), ((i // SP) & 1) ^ 1)
            mbarrier.expect(ready.index(s), a_desc.block_type.nbytes)
            tma.async_copy_global_to_shared(a_desc, [r0 + (t // CHUNKS) * WF, (t % CHUNKS) * BLOCK_K],
                                            ready.index(s), a_bufs.index(s))
            i += 1


@gluon.jit
def _conv_fold_pingpong(a_desc, w1_desc, w2_desc, b_ptr, y_ptr, n_tiles,
                        HF: gl.constexpr, WF: gl.constexpr, OH: gl.constexpr, OW: gl.constexpr, C_OUT: gl.constexpr,
                        KHF: gl.constexpr, CHUNKS: gl.constexpr, STAGES: gl.constexpr, RINGS: gl.constexpr,
                        AREG: gl.constexpr, BLOCK_M: gl.constexpr):
    BLOCK_K: gl.constexpr = a_desc.block_type.shape[1]
    N1: gl.constexpr = w1_desc.block_type.shape[0]
    N2: gl.constexpr = w2_desc.block_type.shape[0]
    KSTEPS: gl.constexpr = KHF * CHUNKS
    TILES_PER_IMG: gl.constexpr = (OH * WF + BLOCK_M - 1) // BLOCK_M
    a_bufs = gl.allocate_shared_memory(gl.float32, [STAGES, BLOCK_M, BLOCK_K], a_desc.layout)
    w1_res = gl.allocate_shared_memory(gl.float32, [KSTEPS, N1, BLOCK_K], w1_desc.layout)
    w2_res = gl.allocate_shared_memory(gl.float32, [KSTEPS, N2, BLOCK_K], w2_desc.layout)
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    wbar = gl.allocate_shared_memory(gl.int64, [1, 1], mbarrier.MBarrierLayout())
    turn = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    mbarrier.init(turn.index(0), count=1)
    mbarrier.init(turn.index(1), count=1)
    for i in gl.static_range(STAGES):
        mbarrier.init(ready.index(i), count=1)
        mbarrier.init(empty.index(i), count=1)
    mbarrier.init(wbar.index(0), count=1)
    if RINGS == 1:
        gl.warp_specialize([
            (_consumer, (a_bufs, w1_res, w2_res, ready, empty, wbar, turn, b_ptr, y_ptr, n_tiles, 0, WF, OH, OW, C_OUT,
                         TILES_PER_IMG, KSTEPS, STAGES, RINGS, AREG, BLOCK_M, N1, N2)),
            (_consumer, (a_bufs, w1_res, w2_res, ready, empty, wbar, turn, b_ptr, y_ptr, n_tiles, 1, WF, OH, OW, C_OUT,
                         TILES_PER_IMG, KSTEPS, STAGES, RINGS, AREG, BLOCK_M, N1, N2)),
            (_producer, (a_desc, w1_desc, w2_desc, a_bufs, w1_res, w2_res, ready, empty, wbar, n_tiles, 0, HF, WF,
                         TILES_PER_IMG, CHUNKS, KSTEPS, STAGES, RINGS, BLOCK_M, BLOCK_K, N1)),
        ], [4, 1], [232, 40])
    else:
        gl.warp_specialize([
            (_consumer, (a_bufs, w1_res, w2_res, ready, empty, wbar, turn, b_ptr, y_ptr, n_tiles, 0, WF, OH, OW, C_OUT,
                         TILES_PER_IMG, KSTEPS, STAGES, RINGS, AREG, BLOCK_M, N1, N2)),
            (_consumer, (a_bufs, w1_res, w2_res, ready, empty, wbar, turn, b_ptr, y_ptr, n_tiles, 1, WF, OH, OW, C_OUT,
                         TILES_PER_IMG, KSTEPS, STAGES, RINGS, AREG, BLOCK_M, N1, N2)),
            (_producer, (a_desc, w1_desc, w2_desc, a_bufs, w1_res, w2_res, ready, empty, wbar, n_tiles, 0, HF, WF,
                         TILES_PER_IMG, CHUNKS, KSTEPS, STAGES, RINGS, BLOCK_M, BLOCK_K, N1)),
            (_producer, (a_desc, w1_desc, w2_desc, a_bufs, w1_res, w2_res, ready, empty, wbar, n_tiles, 1, HF, WF,
                         TILES_PER_IMG, CHUNKS, KSTEPS, STAGES, RINGS, BLOCK_M, BLOCK_K, N1)),
        ], [4, 1, 1], [232, 40, 40])


BLOCK_M, BLOCK_K, N1, N2 = 128, 16, 64, 32
# (A stages in all, rings, A through registers): one shared ring with turns, or a ring per MMA warpgroup
VARIANTS = ((7, 1, False), (8, 2, False), (6, 2, False), (7, 1, True), (8, 2, True))


def layouts():
    return (gl.NVMMASharedLayout.get_default_for([BLOCK_M, BLOCK_K], gl.float32),
            gl.NVMMASharedLayout.get_default_for([N1, BLOCK_K], gl.float32),
            gl.NVMMASharedLayout.get_default_for([N2, BLOCK_K], gl.float32))


def constexprs(hf: int, wf: int, oh: int, ow: int, c_out: int, khf: int, row: int, stages: int, rings: int = 1,
               areg: bool = False) -> dict:
    return {"HF": hf, "WF": wf, "OH": oh, "OW": ow, "C_OUT": c_out, "KHF": khf, "CHUNKS": row // BLOCK_K,
            "STAGES": stages, "RINGS": rings, "AREG": areg, "BLOCK_M": BLOCK_M}


def launch(xf: torch.Tensor, rows: int, cf: int, kwf: int, wp: torch.Tensor, b: torch.Tensor, out: torch.Tensor,
           n_tiles: int, progs: int, cx: dict):
    """xf: the fold's buffer; wp: the folded weight [C_out, KHF·KWF·CF] unpadded, rounded; out NCHW."""
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor
    la, l1, l2 = layouts()
    a = TensorDescriptor(xf, [rows, kwf * cf], [cf, 1], [BLOCK_M, BLOCK_K], la)
    w1 = TensorDescriptor.from_tensor(wp, [N1, BLOCK_K], l1)
    w2 = TensorDescriptor.from_tensor(wp, [N2, BLOCK_K], l2)
    return _conv_fold_pingpong[(progs,)](a, w1, w2, b, out, n_tiles, **cx, num_warps=4, maxnreg=168)


def compile_only() -> None:
    """Compile for sm_90 without a GPU (triton 3.6's ptxas), so that the kernel's errors show before a GPU call."""
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon._runtime import GluonASTSource
    la, l1, l2 = layouts()
    sig = {"a_desc": f"tensordesc<fp32[{BLOCK_M}, {BLOCK_K}],{la!r}>", "w1_desc": f"tensordesc<fp32[{N1}, {BLOCK_K}],{l1!r}>",
           "w2_desc": f"tensordesc<fp32[{N2}, {BLOCK_K}],{l2!r}>", "b_ptr": "*fp32", "y_ptr": "*fp32", "n_tiles": "i32"}
    for stages, rings, areg in VARIANTS:
        cx = constexprs(57, 57, 55, 55, 96, 3, 144, stages, rings, areg)
        src = GluonASTSource(_conv_fold_pingpong, {**sig, **{k: "constexpr" for k in cx}}, cx)
        try:
            k = triton.compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": 4, "maxnreg": 168})
        except Exception as e:  # noqa: BLE001 - report and go on to the next variant
            print(f"{stages} stages, {rings} ring(s), A in registers {areg}: {type(e).__name__}: {str(e)[-600:]}")
            continue
        ptx = k.asm.get("ptx", "")
        print(f"{stages} stages, {rings} ring(s), A in registers {areg}: shared {k.metadata.shared} bytes; PTX wgmma",
              ptx.count("wgmma.mma_async"), "cp.async.bulk.tensor", ptx.count("cp.async.bulk.tensor"), "local ld/st",
              ptx.count("ld.local") + ptx.count("st.local"))


def main() -> None:
    if "--compile-only" in sys.argv:
        compile_only()
        return
    import torch.nn.functional as F

    from convtune.kernels import Meta
    from convtune.kernels import fold_igemm as fi
    from convtune.kernels.common import geometry
    from convtune.kernels.precision import round_to_tf32
    from convtune.measure import bench
    from convtune.measure.bench import TimingSettings

    dev = torch.device("cuda")
    print(torch.cuda.get_device_name(), torch.__version__, triton.__version__, flush=True)
    torch.backends.cudnn.allow_tf32 = True
    gen = torch.Generator().manual_seed(1)
    batch = int(sys.argv[sys.argv.index("--batch") + 1]) if "--batch" in sys.argv else 256
    check_only = "--check" in sys.argv  # correctness alone (a hang costs the caller's timeout, not a whole call)
    x = torch.rand((batch, 3, 224, 224), generator=gen).to(dev)
    conv = torch.nn.Conv2d(3, 96, 11, stride=4, padding=2)
    w, b = conv.weight.detach().to(dev), conv.bias.detach().to(dev)
    meta = Meta(128, 128, 32, 4, 4)
    plan = fi.make_plan(geometry(x, w, 4, 2, 1), True, meta, "tf32")
    n, hf, wf, cf = plan.folded_shape
    khf, kwf = plan.taps
    oh, ow = plan.constexprs["OH"], plan.constexprs["OW"]
    out = torch.empty((n, 96, oh, ow), device=dev)
    ref = fi.launch(x, w, b, 4, 2, 1, meta, "tf32", out=torch.empty_like(out)).out.clone()
    theirs = F.conv2d(x, w, b, stride=4, padding=2)
    xf = fi.fold(x, plan)
    wp = round_to_tf32(fi.fold_weight(w, plan.stride, plan.taps, cf, kwf * cf))
    n_tiles = n * triton.cdiv(oh * wf, BLOCK_M)
    n_sm = torch.cuda.get_device_properties(dev).multi_processor_count
    fast = TimingSettings(rounds=7, reps=20, warmup=3)

    def t(label: str, fn) -> float:
        ms = bench.time_gpu(fn, fast, dev).median_ms
        print(f"{label:80s} {ms:.4f} ms", flush=True)
        return ms

    if check_only:
        for stages, rings, areg in VARIANTS:
            out.fill_(float("nan"))
            launch(xf, plan.rows, cf, kwf, wp, b, out, n_tiles, n_sm,
                   constexprs(hf, wf, oh, ow, 96, khf, kwf * cf, stages, rings, areg))
            torch.cuda.synchronize()
            print(f"batch {batch}, {stages} stages, {rings} ring(s), A in registers {areg}: allclose 1e-5 to the library "
                  f"{bool(torch.allclose(out, ref, atol=1e-5, rtol=1e-5))}, max |diff| {(out - ref).abs().max().item():.2e}, "
                  f"judge {bool(torch.allclose(out, theirs, atol=1e-4, rtol=1e-4))}", flush=True)
        return
    t("library prepared call (fold + conv), M128-N64+32-K32-w4-s4", fi.prepared(x, w, b, 4, 2, 1, meta, "tf32", out=out))
    fi.run(plan, x, w, b, out)
    key = (plan.binary_key, dev.index or 0, b.data_ptr() & 15, out.data_ptr() & 15)
    conv_lib = fi._bound[(key, plan.grid)][0]
    wlib = fi.packed_weight(w, plan)
    t("library conv alone", lambda: conv_lib(*fi._descriptors(plan, xf, wlib), b, out))
    best = None
    for stages, rings, areg in VARIANTS:
        cx = constexprs(hf, wf, oh, ow, 96, khf, kwf * cf, stages, rings, areg)
        try:
            out.fill_(float("nan"))
            k = launch(xf, plan.rows, cf, kwf, wp, b, out, n_tiles, n_sm, cx)
            torch.cuda.synchronize()
            info = (f"regs {k.n_regs}, spills {k.n_spills}, smem {k.metadata.shared // 1024} KB, "
                    f"allclose 1e-5 to the library {bool(torch.allclose(out, ref, atol=1e-5, rtol=1e-5))}, "
                    f"max |diff| {(out - ref).abs().max().item():.2e}, "
                    f"judge {bool(torch.allclose(out, theirs, atol=1e-4, rtol=1e-4))}")
            ms = t(f"gluon, weight resident, {stages} A stages, {rings} ring(s), A in registers {areg} [{info}]",
                   lambda cx=cx: launch(xf, plan.rows, cf, kwf, wp, b, out, n_tiles, n_sm, cx))
            best = min(best or (ms, cx), (ms, cx), key=lambda b: b[0])
        except Exception as e:  # noqa: BLE001 - a variant that fails is a result here
            print(f"gluon {stages} stages, {rings} ring(s), A in registers {areg}: {type(e).__name__}: {str(e)[:400]}",
                  flush=True)
    cx = best[1]
    t(f"tiled fold + gluon conv ({cx['STAGES']} stages, {cx['RINGS']} ring(s), A in registers {cx['AREG']})",
      lambda: launch(fi.fold(x, plan), plan.rows, cf, kwf, wp, b, out, n_tiles, n_sm, cx))
    t("library prepared call again", fi.prepared(x, w, b, 4, 2, 1, meta, "tf32", out=out))


if __name__ == "__main__":
    main()
