"""The Gluon kernel of `fused_gluon` (kernels/fused_gluon.py says what it computes, why, and what it measured).

Imported only when a launch needs it (fused_gluon._kernel_module): Gluon compiles for NVIDIA GPUs only and the Triton
interpreter cannot run it. Everything here is specialised to stride 4 × 4 over 3 input channels: a K step of 16 is
one channel's 4 input rows × 4 columns, the tile one output row of at most 64 columns, the output channels 64 + 32.
"""

from __future__ import annotations

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import mbarrier, tma, warpgroup_mma, warpgroup_mma_wait

# TMA's global → shared load: async_copy_global_to_shared in triton 3.6 (the H200 machine's), async_load from 3.7 on
_tma_load = getattr(tma, "async_load", None) or tma.async_copy_global_to_shared

# (constexpr objects: a jit function reads no other globals; .value is the int)
BLOCK_M = gl.constexpr(64)  # an output row a tile (OW ≤ 64): the M of one warpgroup's wgmma
BLOCK_K = gl.constexpr(16)  # a K step: one input channel's SH × SW = 4 × 4 window
N1 = gl.constexpr(64)  # the output channels as two MMAs sharing each A operand (tensor shapes are powers of two)
N2 = gl.constexpr(32)


@gluon.jit
def _round_tf32(v):
    """To nearest TF32, ties away from zero: the rounding of kernels/precision.round_tf32 (and of fold_igemm's fold),
    in two integer instructions (ptxas emulates cvt.rna.tf32.f32 on sm_90 in three; it measured no faster)."""
    bits = v.to(gl.int32, bitcast=True)
    return ((bits + 0x1000) & -8192).to(gl.float32, bitcast=True)


@gluon.jit
def _prefetch_rows(x_ptr, row, n_rows, C: gl.constexpr, H: gl.constexpr, W: gl.constexpr, OH: gl.constexpr,
                   PH: gl.constexpr, SH: gl.constexpr, KHF: gl.constexpr):
    """Into L2, the input rows that output row `row` is the first to read (its last folded kernel row's SH input rows
    of every channel: 3 × 4 rows of 896 B for L1 #50), one 128-byte line a thread of the warpgroup. -2 % on L1 #50
    (session 17) two of the warpgroup's rows ahead; one row ahead, with the stores hinted, -4.8 % more (0.3387 → 0.3225
    ms; row + 0, 1, 2 within 0.3 % of it, two rows 0.3387, three 0.3540; benchmarks/probe_fused_gluon_hints.py,
    session 19)."""
    LINES: gl.constexpr = (W * 4 + 127) // 128
    gl.static_assert(C * SH * LINES <= 128, "one line a thread")
    layout: gl.constexpr = gl.BlockedLayout([1], [32], [4], [0])
    line = gl.arange(0, 128, layout=layout)
    c = line // (SH * LINES)
    h = SH * (row % OH + KHF - 1) - PH + (line // LINES) % SH
    ok = (line < C * SH * LINES) & (h >= 0) & (h < H) & (row < n_rows)
    at = gl.where(ok, ((row // OH).to(gl.int64) * C + c) * (H * W) + h * W + (line % LINES) * 32, 0)
    gl.inline_asm_elementwise("prefetch.global.L2 [$1]; mov.u32 $0, 0;", "=r,l", [x_ptr + at], dtype=gl.int32,
                              is_pure=False, pack=1)


@gluon.jit
def _gather(x_at, col, rows_r, row, tap, live, C: gl.constexpr, H: gl.constexpr, W: gl.constexpr, OH: gl.constexpr,
            PH: gl.constexpr, PW: gl.constexpr, SH: gl.constexpr, SW: gl.constexpr, KWF: gl.constexpr):
    """The A operand of folded tap `tap` (row a = tap // KWF, column b = tap % KWF) for output row `row`, as C K steps
    of 16 (one a channel) in the MMA's register layout: element [ow, 4r + s] of step c is
    x[c, SH·(oh + a) + r - PH, SW·(ow + b) + s - PW], zero outside the input. `x_at` = x + r·W + SW·ow + s (pointers
    made once: a tap adds a scalar, where int32 offsets cost ptxas twelve instructions a pointer), `col` = SW·ow + s -
    PW (past W where ow ≥ OW), `rows_r` = r; `live`: the row is the program's (a gather ahead may run past its range)."""
    a = tap // KWF
    b = tap % KWF
    h0 = SH * (row % OH + a) - PH
    w_at = col + SW * b
    keep = (w_at >= 0) & (w_at < W) & (rows_r + h0 >= 0) & (rows_r + h0 < H) & live
    p = x_at + ((row // OH).to(gl.int64) * (C * H * W) + (h0 * W + SW * b - PW))
    a0 = gl.load(p, mask=keep, other=0.0)
    a1 = gl.load(p + H * W, mask=keep, other=0.0)
    a2 = gl.load(p + 2 * H * W, mask=keep, other=0.0)
    return a0, a1, a2


@gluon.jit
def _rows(x_ptr, w1_res, w2_res, wbar, b_ptr, y_ptr, n_rows, WHO: gl.constexpr, NWG: gl.constexpr,
          C: gl.constexpr, H: gl.constexpr, W: gl.constexpr, OH: gl.constexpr, OW: gl.constexpr, C_OUT: gl.constexpr,
          PH: gl.constexpr, PW: gl.constexpr, SH: gl.constexpr, SW: gl.constexpr, KHF: gl.constexpr,
          KWF: gl.constexpr, HAS_BIAS: gl.constexpr, OUT_CL: gl.constexpr):
    """MMA warpgroup WHO of NWG: output rows lo + WHO, lo + WHO + NWG, ... of this program's range [lo, hi) of the
    batch's N·OH rows, so that the input rows a row shares with the next stay in L1. Each tap's gather is issued while
    the previous tap's MMAs run (the last tap's gathers the next row's first); each tap then waits for its MMAs:
    MMAs left running across the loop's back edge gave wrong results (the loop-carried A registers are not those the
    MMAs read; session 17)."""
    gl.static_assert(C == 3, "the gather names three channels' K steps")
    mma: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, N1, 8])
    mma2: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, N2, 8])
    dot_a: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=mma, k_width=1)
    dot_a2: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=mma2, k_width=1)
    TAPS: gl.constexpr = KHF * KWF
    OHW: gl.constexpr = OH * OW
    pid = gl.program_id(0)
    nprog = gl.num_programs(0)
    lo = (pid * n_rows) // nprog
    hi = ((pid + 1) * n_rows) // nprog

    ow = gl.expand_dims(gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, dot_a)), 1)
    k = gl.expand_dims(gl.arange(0, BLOCK_K, layout=gl.SliceLayout(0, dot_a)), 0)
    rows_r = k // SW
    x_at = x_ptr + (rows_r * W + SW * ow + k % SW)
    col = gl.where(ow < OW, SW * ow + k % SW - PW, W + 2 * SW * KWF)  # ow past the image: past W for every tap

    on = gl.arange(0, N1, layout=gl.SliceLayout(0, mma))
    om = gl.expand_dims(gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, mma)), 1)
    on2 = N1 + gl.arange(0, N2, layout=gl.SliceLayout(0, mma2))
    om2 = gl.expand_dims(gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, mma2)), 1)
    if HAS_BIAS:
        bias = gl.expand_dims(gl.load(b_ptr + on, mask=on < C_OUT, other=0.0), 0)
        bias2 = gl.expand_dims(gl.load(b_ptr + on2, mask=on2 < C_OUT, other=0.0), 0)
    if OUT_CL:  # [N, OH, OW, C_OUT]: a row's outputs are OW·C_OUT consecutive floats
        out_at = om * C_OUT + gl.expand_dims(on, 0)
        out_at2 = om2 * C_OUT + gl.expand_dims(on2, 0)
    else:  # [N, C_OUT, OH, OW]
        out_at = gl.expand_dims(on, 0) * OHW + om
        out_at2 = gl.expand_dims(on2, 0) * OHW + om2
    out_keep = (om < OW) & gl.expand_dims(on < C_OUT, 0)
    out_keep2 = (om2 < OW) & gl.expand_dims(on2 < C_OUT, 0)

    mbarrier.wait(wbar.index(0), 0)  # the weight is resident
    row = lo + WHO
    c0, c1, c2 = _gather(x_at, col, rows_r, gl.minimum(row, n_rows - 1), 0, row < hi, C, H, W, OH, PH, PW, SH, SW,
                         KWF)
    while row < hi:
        _prefetch_rows(x_ptr, row + NWG, n_rows, C, H, W, OH, PH, SH, KHF)  # this warpgroup's next row
        acc = gl.zeros([BLOCK_M, N1], gl.float32, mma)
        acc2 = gl.zeros([BLOCK_M, N2], gl.float32, mma2)
        for tap in range(TAPS):
            g_row = row + (tap + 1 >= TAPS).to(gl.int32) * NWG  # the gather ahead: past the last tap, the next row
            m0, m1, m2 = _gather(x_at, col, rows_r, gl.minimum(g_row, n_rows - 1), (tap + 1) % TAPS, g_row < hi, C,
                                 H, W, OH, PH, PW, SH, SW, KWF)
            a0 = _round_tf32(c0)
            a1 = _round_tf32(c1)
            a2 = _round_tf32(c2)
            # the same registers in the N2 MMA's operand layout (checked at compile time: nothing moves)
            b0 = gl.convert_layout(a0, dot_a2, assert_trivial=True)
            b1 = gl.convert_layout(a1, dot_a2, assert_trivial=True)
            b2 = gl.convert_layout(a2, dot_a2, assert_trivial=True)
            acc = warpgroup_mma(a0, w1_res.index(tap * C).permute((1, 0)), acc, is_async=True)
            acc2 = warpgroup_mma(b0, w2_res.index(tap * C).permute((1, 0)), acc2, is_async=True)
            acc = warpgroup_mma(a1, w1_res.index(tap * C + 1).permute((1, 0)), acc, is_async=True)
            acc2 = warpgroup_mma(b1, w2_res.index(tap * C + 1).permute((1, 0)), acc2, is_async=True)
            acc = warpgroup_mma(a2, w1_res.index(tap * C + 2).permute((1, 0)), acc, is_async=True)
            acc2 = warpgroup_mma(b2, w2_res.index(tap * C + 2).permute((1, 0)), acc2, is_async=True)
            acc, acc2, a0, a1, a2, b0, b1, b2 = warpgroup_mma_wait(0, deps=(acc, acc2, a0, a1, a2, b0, b1, b2))
            c0 = m0
            c1 = m1
            c2 = m2
        if HAS_BIAS:
            acc = acc + bias
            acc2 = acc2 + bias2
        img = (row // OH).to(gl.int64) * (C_OUT * OHW)
        if OUT_CL:
            y_row = y_ptr + (img + (row % OH) * (OW * C_OUT))
        else:
            y_row = y_ptr + (img + (row % OH) * OW)
        # the output (297 MB on L1 #50) marked to leave L2 first, so that it evicts less of the input rows the next
        # output rows read: -2 % (0.3454 → 0.3387 ms; streaming .cs the same; the gathers marked evict_last +7 %;
        # benchmarks/probe_fused_gluon_hints.py, session 19)
        gl.store(y_row + out_at, acc, mask=out_keep, eviction_policy="evict_first")
        gl.store(y_row + out_at2, acc2, mask=out_keep2, eviction_policy="evict_first")
        row += NWG


@gluon.jit
def _conv2d_fused_gluon_kernel(x_ptr, w1_desc, w2_desc, b_ptr, y_ptr, n_rows, NWG: gl.constexpr, REGS: gl.constexpr,
                               C: gl.constexpr, H: gl.constexpr, W: gl.constexpr, OH: gl.constexpr, OW: gl.constexpr,
                               C_OUT: gl.constexpr, PH: gl.constexpr, PW: gl.constexpr, SH: gl.constexpr,
                               SW: gl.constexpr, KHF: gl.constexpr, KWF: gl.constexpr, HAS_BIAS: gl.constexpr,
                               OUT_CL: gl.constexpr, LLVM_OPT: gl.constexpr):
    """A persistent program an SM: the packed weight [C_out, K] loaded once by TMA into shared memory as K steps of 16,
    in columns N1 + N2, then NWG MMA warpgroups on the program's output rows (_rows). LLVM_OPT: the level the binary
    is compiled at (kernels/llvm_opt; a constexpr so that levels never share a cache entry)."""
    KSTEPS: gl.constexpr = KHF * KWF * C
    w1_res = gl.allocate_shared_memory(gl.float32, [KSTEPS, N1, BLOCK_K], w1_desc.layout)
    w2_res = gl.allocate_shared_memory(gl.float32, [KSTEPS, N2, BLOCK_K], w2_desc.layout)
    wbar = gl.allocate_shared_memory(gl.int64, [1, 1], mbarrier.MBarrierLayout())
    mbarrier.init(wbar.index(0), count=1)
    mbarrier.expect(wbar.index(0), KSTEPS * (w1_desc.block_type.nbytes + w2_desc.block_type.nbytes))
    for t in gl.static_range(KSTEPS):
        _tma_load(w1_desc, [0, t * BLOCK_K], wbar.index(0), w1_res.index(t))
        _tma_load(w2_desc, [N1, t * BLOCK_K], wbar.index(0), w2_res.index(t))
    # The partitions' argument tuples are spelled out: built by tuple concatenation, the constexprs reach _rows as
    # runtime values and its static_assert fails to compile (triton 3.6)
    if NWG == 2:
        gl.warp_specialize([
            (_rows, (x_ptr, w1_res, w2_res, wbar, b_ptr, y_ptr, n_rows, 0, NWG, C, H, W, OH, OW, C_OUT, PH, PW, SH,
                     SW, KHF, KWF, HAS_BIAS, OUT_CL)),
            (_rows, (x_ptr, w1_res, w2_res, wbar, b_ptr, y_ptr, n_rows, 1, NWG, C, H, W, OH, OW, C_OUT, PH, PW, SH,
                     SW, KHF, KWF, HAS_BIAS, OUT_CL)),
        ], [4], [REGS])
    else:
        gl.warp_specialize([
            (_rows, (x_ptr, w1_res, w2_res, wbar, b_ptr, y_ptr, n_rows, 0, NWG, C, H, W, OH, OW, C_OUT, PH, PW, SH,
                     SW, KHF, KWF, HAS_BIAS, OUT_CL)),
            (_rows, (x_ptr, w1_res, w2_res, wbar, b_ptr, y_ptr, n_rows, 1, NWG, C, H, W, OH, OW, C_OUT, PH, PW, SH,
                     SW, KHF, KWF, HAS_BIAS, OUT_CL)),
            (_rows, (x_ptr, w1_res, w2_res, wbar, b_ptr, y_ptr, n_rows, 2, NWG, C, H, W, OH, OW, C_OUT, PH, PW, SH,
                     SW, KHF, KWF, HAS_BIAS, OUT_CL)),
        ], [4, 4], [REGS, REGS])


def weight_layouts() -> tuple:
    """The shared-memory layouts of the weight's two column tiles, [N1, 16] and [N2, 16]."""
    return (gl.NVMMASharedLayout.get_default_for([N1.value, BLOCK_K.value], gl.float32),
            gl.NVMMASharedLayout.get_default_for([N2.value, BLOCK_K.value], gl.float32))


def descriptors(wp) -> tuple:
    """TMA descriptors of the packed weight [N1 + N2, K] (kernels/fused_gluon.pack_weight) in its two column tiles."""
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    l1, l2 = weight_layouts()
    return (TensorDescriptor.from_tensor(wp, [N1.value, BLOCK_K.value], l1),
            TensorDescriptor.from_tensor(wp, [N2.value, BLOCK_K.value], l2))
