"""The Gluon kernel of `fused_gluon` (kernels/variants/fused_gluon.py says what it computes, why, and what it measured).

Imported only when a launch needs it (fused_gluon._kernel_module): Gluon compiles for NVIDIA GPUs only and the Triton
interpreter cannot run it. Everything here is specialised to stride 4 × 4 over 3 input channels: a K step of 16 is
one channel's 4 input rows × 4 columns (two TF32 wgmmas in float32, one 16-bit wgmma in bfloat16 and float16), the
tile one output row of at most 64 columns, the output channels 64 + 32, the folded kernel 3 rows (the window's three
accumulators; smaller kernels are folded with zero rows to 3). Each MMA warpgroup hands its finished rows (float32
sums) through shared memory to two store warps of its own (kernels/variants/fused_gluon_store.py), which add the
bias, apply the epilogue chain and store in the input's dtype.
"""

from __future__ import annotations

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import mbarrier, tma, warpgroup_mma, warpgroup_mma_wait

from convtune.kernels.variants.fused_gluon_store import (BLOCK_M, N1, N2, STORE_REGS, STORE_WARPS, _hand_over,
                                                        _store_rows)

# TMA's global → shared load: async_copy_global_to_shared in triton 3.6 (the H200 machine's), async_load from 3.7 on
_tma_load = getattr(tma, "async_load", None) or tma.async_copy_global_to_shared

# (constexpr objects: a jit function reads no other globals; .value is the int)
BLOCK_K = gl.constexpr(16)  # a K step: one input channel's SH × SW = 4 × 4 window
# Folded input rows ahead of the window that the L2 prefetch asks for. L1 #50 in float32 against 2 ahead: 1 ahead
# 0.9640-0.9649 of its time on the H200 and 0.9473-0.9503 on the H100, 3 ahead 1.0152 and 1.0186; in bfloat16 (H200,
# CUDA graphs) 2 ahead ran 1.0021 of 1 ahead's time and none ahead 1.0526
AHEAD = gl.constexpr(1)


@gluon.jit
def _round_tf32(v):
    """To nearest TF32, ties away from zero: the rounding of kernels/precision.round_tf32 (and of fold_igemm's fold),
    in two integer instructions (ptxas emulates cvt.rna.tf32.f32 on sm_90 in three; it measured no faster)."""
    bits = v.to(gl.int32, bitcast=True)
    return ((bits + 0x1000) & -8192).to(gl.float32, bitcast=True)


@gluon.jit
def _prefetch_folded(x_ptr, img, f, live, C: gl.constexpr, H: gl.constexpr, W: gl.constexpr, PH: gl.constexpr,
                     SH: gl.constexpr):
    """Into L2, folded input row f of image img (its SH input rows of every channel: 3 × 4 rows of 896 B for L1 #50
    in float32, 448 B in 16 bits), one 128-byte line a thread of the warpgroup."""
    BYTES: gl.constexpr = x_ptr.dtype.element_ty.primitive_bitwidth // 8
    LINES: gl.constexpr = (W * BYTES + 127) // 128
    gl.static_assert(C * SH * LINES <= 128, "one line a thread")
    layout: gl.constexpr = gl.BlockedLayout([1], [32], [4], [0])
    line = gl.arange(0, 128, layout=layout)
    c = line // (SH * LINES)
    h = SH * f - PH + (line // LINES) % SH
    ok = (line < C * SH * LINES) & (h >= 0) & (h < H) & live
    at = gl.where(ok, (img.to(gl.int64) * C + c) * (H * W) + h * W + (line % LINES) * (128 // BYTES), 0)
    gl.inline_asm_elementwise("prefetch.global.L2 [$1]; mov.u32 $0, 0;", "=r,l", [x_ptr + at], dtype=gl.int32,
                              is_pure=False, pack=1)


@gluon.jit
def _operand(v, HALF: gl.constexpr):
    """A gathered K step as the MMA takes it: float32 rounded to TF32 (_round_tf32), a 16-bit one as it is."""
    if HALF:
        return v
    else:
        return _round_tf32(v)


@gluon.jit
def _gather(x_at, col, rows_r, img, f, b, live, C: gl.constexpr, H: gl.constexpr, W: gl.constexpr,
            PH: gl.constexpr, PW: gl.constexpr, SH: gl.constexpr, SW: gl.constexpr):
    """Folded input row f, tap column b of image img as C K steps of 16 (one a channel) in the MMA's register layout:
    element [ow, 4r + s] of step c is x[img, c, SH·f + r - PH, SW·(ow + b) + s - PW], zero outside the input. `x_at`
    = x + r·W + SW·ow + s (pointers made once: a gather adds a scalar, where int32 offsets cost ptxas twelve
    instructions a pointer), `col` = SW·ow + s - PW (past W where ow ≥ OW), `rows_r` = r; `live`: the gather is the
    warpgroup's (one ahead may run past its range)."""
    h0 = SH * f - PH
    w_at = col + SW * b
    keep = (w_at >= 0) & (w_at < W) & (rows_r + h0 >= 0) & (rows_r + h0 < H) & live
    p = x_at + (img.to(gl.int64) * (C * H * W) + (h0 * W + SW * b - PW))
    a0 = gl.load(p, mask=keep, other=0.0)
    a1 = gl.load(p + H * W, mask=keep, other=0.0)
    a2 = gl.load(p + 2 * H * W, mask=keep, other=0.0)
    return a0, a1, a2


@gluon.jit
def _k_step(a, b, w1_res, w2_res, t, ta, tb, tc, acc_a, acc_b, acc_c, acc_a2, acc_b2, acc_c2, DA: gl.constexpr,
            DB: gl.constexpr, DC: gl.constexpr):
    """One K step's MMAs (a: the gathered step, b: its registers in the N2 MMA's operand layout, t: its index among
    the tap's K steps) into the window's rows the flags name, both column tiles, left running."""
    if DA:
        acc_a = warpgroup_mma(a, w1_res.index(ta + t).permute((1, 0)), acc_a, is_async=True)
        acc_a2 = warpgroup_mma(b, w2_res.index(ta + t).permute((1, 0)), acc_a2, is_async=True)
    if DB:
        acc_b = warpgroup_mma(a, w1_res.index(tb + t).permute((1, 0)), acc_b, is_async=True)
        acc_b2 = warpgroup_mma(b, w2_res.index(tb + t).permute((1, 0)), acc_b2, is_async=True)
    if DC:
        acc_c = warpgroup_mma(a, w1_res.index(tc + t).permute((1, 0)), acc_c, is_async=True)
        acc_c2 = warpgroup_mma(b, w2_res.index(tc + t).permute((1, 0)), acc_c2, is_async=True)
    return acc_a, acc_b, acc_c, acc_a2, acc_b2, acc_c2


@gluon.jit
def _column(a0, a1, a2, w1_res, w2_res, ta, tb, tc, acc_a, acc_b, acc_c, acc_a2, acc_b2, acc_c2,
            dot_a2: gl.constexpr, DA: gl.constexpr, DB: gl.constexpr, DC: gl.constexpr):
    """A gather's MMAs (3 K steps, both column tiles) into the window's rows the flags name, waited for (_window): tap
    (2, b) of row f - 2 (ta), (1, b) of row f - 1 (tb), (0, b) of row f (tc), in one order whatever rows run."""
    # the same registers in the N2 MMA's operand layout (checked at compile time: nothing moves)
    b0 = gl.convert_layout(a0, dot_a2, assert_trivial=True)
    b1 = gl.convert_layout(a1, dot_a2, assert_trivial=True)
    b2 = gl.convert_layout(a2, dot_a2, assert_trivial=True)
    acc_a, acc_b, acc_c, acc_a2, acc_b2, acc_c2 = _k_step(a0, b0, w1_res, w2_res, 0, ta, tb, tc, acc_a, acc_b, acc_c,
                                                          acc_a2, acc_b2, acc_c2, DA, DB, DC)
    acc_a, acc_b, acc_c, acc_a2, acc_b2, acc_c2 = _k_step(a1, b1, w1_res, w2_res, 1, ta, tb, tc, acc_a, acc_b, acc_c,
                                                          acc_a2, acc_b2, acc_c2, DA, DB, DC)
    acc_a, acc_b, acc_c, acc_a2, acc_b2, acc_c2 = _k_step(a2, b2, w1_res, w2_res, 2, ta, tb, tc, acc_a, acc_b, acc_c,
                                                          acc_a2, acc_b2, acc_c2, DA, DB, DC)
    acc_a, acc_a2, acc_b, acc_b2, acc_c, acc_c2, a0, a1, a2, b0, b1, b2 = warpgroup_mma_wait(
        0, deps=(acc_a, acc_a2, acc_b, acc_b2, acc_c, acc_c2, a0, a1, a2, b0, b1, b2))
    return acc_a, acc_b, acc_c, acc_a2, acc_b2, acc_c2


@gluon.jit
def _step(x_at, col, rows_r, w1_res, w2_res, c0, c1, c2, acc_a, acc_b, acc_c, acc_a2, acc_b2, acc_c2, img, f, i,
          steps, end, hi, n_rows, dot_a2: gl.constexpr, DA: gl.constexpr, DB: gl.constexpr, DC: gl.constexpr,
          HALF: gl.constexpr, C: gl.constexpr, H: gl.constexpr, W: gl.constexpr, OH: gl.constexpr, PH: gl.constexpr,
          PW: gl.constexpr, SH: gl.constexpr, SW: gl.constexpr, KWF: gl.constexpr):
    """Step i of a band (folded row f of image img): its KWF columns, each gathering the next while its MMAs (into the
    rows DA, DB, DC: _column) run. c0, c1, c2: its first column; returns the accumulators and the next step's."""
    for b in range(KWF):
        # the gather ahead: this folded row's next column, the next folded row's first, or the next band's first
        # (where the band ends before the range does, the next image's row 0)
        last_b = b + 1 >= KWF
        wrap = (last_b & (i + 1 >= steps)).to(gl.int32)
        g_img = img + wrap * (end // OH - img)
        g_f = (f + last_b.to(gl.int32)) * (1 - wrap) + wrap * (end % OH)
        # (the image clamped in the loop: with N - 1 hoisted out of the loop the binary ran 4 % slower, 0.2986-0.3012
        # ms against 0.2863-0.2895, the SASS differing in 2-3 integer instructions of a kind)
        m0, m1, m2 = _gather(x_at, col, rows_r, gl.minimum(g_img, n_rows // OH - 1), g_f, (b + 1) % KWF,
                             (wrap == 0) | (end < hi), C, H, W, PH, PW, SH, SW)
        acc_a, acc_b, acc_c, acc_a2, acc_b2, acc_c2 = _column(
            _operand(c0, HALF), _operand(c1, HALF), _operand(c2, HALF), w1_res, w2_res, (2 * KWF + b) * C,
            (KWF + b) * C, b * C, acc_a, acc_b, acc_c, acc_a2, acc_b2, acc_c2, dot_a2, DA, DB, DC)
        c0 = m0
        c1 = m1
        c2 = m2
    return acc_a, acc_b, acc_c, acc_a2, acc_b2, acc_c2, c0, c1, c2


@gluon.jit
def _window(x_ptr, w1_res, w2_res, wbar, o1, o2, full, empty, n_rows, WHO: gl.constexpr, NWG: gl.constexpr,
            C: gl.constexpr, H: gl.constexpr, W: gl.constexpr, OH: gl.constexpr, OW: gl.constexpr, PH: gl.constexpr,
            PW: gl.constexpr, SH: gl.constexpr, SW: gl.constexpr, KWF: gl.constexpr):
    """MMA warpgroup WHO of NWG: the contiguous range [lo, hi) of the batch's N·OH output rows that is its share, in
    bands that end at an image's last row or the range's end, each band walked down with a window of three rows.

    Folded input row f, tap column b, is tap (2, b) of output row f - 2, tap (1, b) of row f - 1 and tap (0, b) of row
    f: it is gathered once and feeds three accumulator pairs (gathered once for each output row that reads it, it fed
    a third of the MMAs, and the gathers bounded the call). After folded row f's KWF columns, row f - 2 has all its
    taps: it is stored and the window moves down a row. A band of R rows takes R + 2 steps; the MMAs into the window's
    rows outside the band (above it in its first two steps, below it in its last two) are skipped. Each row's products
    are summed in the order (tap row, tap column, channel), as fold_igemm sums them: the output is fold_igemm's bit for
    bit. Each column's gather is issued while the previous column's MMAs run (the band's last gather the next band's
    first), and each column then waits for its MMAs: MMAs left running across the loop's back edge gave wrong results
    (the loop-carried A registers are not those the MMAs read), and the columns unrolled with the wait deferred a
    column spilled 48-62 registers (float32, triton 3.6).

    Measured on L1 #50 (float32) side by side in one process: with the skip 0.2697 ms against 0.2952 on the H200,
    0.2841 against 0.2944 on the H100; one warpgroup 0.341 against 0.3116-0.3174 for two (before the skip and the
    store warps); three warpgroups spill (88 registers at 168) and take 0.77. In bfloat16 (H200) the gather issued
    two columns ahead instead of one ran 1.032x slower (0.1669 against 0.1614 ms), with no spills."""
    gl.static_assert(C == 3, "the gather names three channels' K steps")
    # A float32 K step is two TF32 wgmmas of K 8, each lane holding one element of a row's K run; a 16-bit one is a
    # single wgmma of K 16, each lane holding pairs (k_width 2)
    HALF: gl.constexpr = x_ptr.dtype.element_ty.primitive_bitwidth == 16
    MMA_K: gl.constexpr = 16 if HALF else 8
    K_WIDTH: gl.constexpr = 2 if HALF else 1
    mma: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, N1, MMA_K])
    mma2: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, N2, MMA_K])
    dot_a: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=mma, k_width=K_WIDTH)
    dot_a2: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=mma2, k_width=K_WIDTH)
    wg = gl.program_id(0) * NWG + WHO
    n_wg = gl.num_programs(0) * NWG
    lo = (wg * n_rows) // n_wg
    hi = ((wg + 1) * n_rows) // n_wg

    ow = gl.expand_dims(gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, dot_a)), 1)
    k = gl.expand_dims(gl.arange(0, BLOCK_K, layout=gl.SliceLayout(0, dot_a)), 0)
    rows_r = k // SW
    x_at = x_ptr + (rows_r * W + SW * ow + k % SW)
    # In 16 bits a lane holds K pairs (k, k + 1) of one input row (k_width 2). With an even padding and width a pair
    # lies on one side of each of the image's edges, so its mask is its first element's, constant over the pair, and
    # the pair loads as one 32-bit word (with a mask per element, ptxas loaded each element on its own)
    if HALF and (PW % 2 == 0) and (W % 2 == 0):
        k_mask = (k // 2) * 2
    else:
        k_mask = k
    col = gl.where(ow < OW, SW * ow + k_mask % SW - PW, W + 2 * SW * KWF)  # ow past the image: past W for every tap

    mbarrier.wait(wbar.index(0), 0)  # the weight is resident
    r = lo
    c0, c1, c2 = _gather(x_at, col, rows_r, gl.minimum(r, n_rows - 1) // OH, r % OH, 0, r < hi, C, H, W, PH, PW,
                         SH, SW)
    while r < hi:
        img = r // OH
        oh0 = r % OH
        end = gl.minimum(hi, (img + 1) * OH)  # the band: rows r .. end - 1, one image's
        acc_a = gl.zeros([BLOCK_M, N1], gl.float32, mma)  # row f - 2 (its two column tiles)
        acc_a2 = gl.zeros([BLOCK_M, N2], gl.float32, mma2)
        acc_b = gl.zeros([BLOCK_M, N1], gl.float32, mma)  # row f - 1
        acc_b2 = gl.zeros([BLOCK_M, N2], gl.float32, mma2)
        acc_c = gl.zeros([BLOCK_M, N1], gl.float32, mma)  # row f
        acc_c2 = gl.zeros([BLOCK_M, N2], gl.float32, mma2)
        rows = end - r
        steps = rows + 2
        for i in range(steps):
            f = oh0 + i
            _prefetch_folded(x_ptr, img, f + AHEAD, i + AHEAD < steps, C, H, W, PH, SH)
            # the window's rows that are the band's: all three inside it; (f - 1, f) and f at its top, (f - 2, f - 1)
            # and f - 2 at its bottom; f - 1 alone in a band of one row. Chosen for the step, not for each column:
            # the column loop stays as it was (the choice in each column ran 3.4 % slower)
            if (i >= 2) & (i < rows):
                acc_a, acc_b, acc_c, acc_a2, acc_b2, acc_c2, c0, c1, c2 = _step(
                    x_at, col, rows_r, w1_res, w2_res, c0, c1, c2, acc_a, acc_b, acc_c, acc_a2, acc_b2, acc_c2, img,
                    f, i, steps, end, hi, n_rows, dot_a2, True, True, True, HALF, C, H, W, OH, PH, PW, SH, SW, KWF)
            elif i == 0:
                acc_a, acc_b, acc_c, acc_a2, acc_b2, acc_c2, c0, c1, c2 = _step(
                    x_at, col, rows_r, w1_res, w2_res, c0, c1, c2, acc_a, acc_b, acc_c, acc_a2, acc_b2, acc_c2, img,
                    f, i, steps, end, hi, n_rows, dot_a2, False, False, True, HALF, C, H, W, OH, PH, PW, SH, SW, KWF)
            elif (i == 1) & (rows >= 2):
                acc_a, acc_b, acc_c, acc_a2, acc_b2, acc_c2, c0, c1, c2 = _step(
                    x_at, col, rows_r, w1_res, w2_res, c0, c1, c2, acc_a, acc_b, acc_c, acc_a2, acc_b2, acc_c2, img,
                    f, i, steps, end, hi, n_rows, dot_a2, False, True, True, HALF, C, H, W, OH, PH, PW, SH, SW, KWF)
            elif i == 1:
                acc_a, acc_b, acc_c, acc_a2, acc_b2, acc_c2, c0, c1, c2 = _step(
                    x_at, col, rows_r, w1_res, w2_res, c0, c1, c2, acc_a, acc_b, acc_c, acc_a2, acc_b2, acc_c2, img,
                    f, i, steps, end, hi, n_rows, dot_a2, False, True, False, HALF, C, H, W, OH, PH, PW, SH, SW, KWF)
            elif i == rows:
                acc_a, acc_b, acc_c, acc_a2, acc_b2, acc_c2, c0, c1, c2 = _step(
                    x_at, col, rows_r, w1_res, w2_res, c0, c1, c2, acc_a, acc_b, acc_c, acc_a2, acc_b2, acc_c2, img,
                    f, i, steps, end, hi, n_rows, dot_a2, True, True, False, HALF, C, H, W, OH, PH, PW, SH, SW, KWF)
            else:
                acc_a, acc_b, acc_c, acc_a2, acc_b2, acc_c2, c0, c1, c2 = _step(
                    x_at, col, rows_r, w1_res, w2_res, c0, c1, c2, acc_a, acc_b, acc_c, acc_a2, acc_b2, acc_c2, img,
                    f, i, steps, end, hi, n_rows, dot_a2, True, False, False, HALF, C, H, W, OH, PH, PW, SH, SW, KWF)
            # row f - 2 has all its taps from the band's third step on: hand it over, move the window down a row
            if i >= 2:
                _hand_over(o1, o2, full, empty, acc_a, acc_a2, r + i - 2 - lo, WHO)
            acc_a = acc_b
            acc_a2 = acc_b2
            acc_b = acc_c
            acc_b2 = acc_c2
            acc_c = gl.zeros([BLOCK_M, N1], gl.float32, mma)
            acc_c2 = gl.zeros([BLOCK_M, N2], gl.float32, mma2)
        r = end


@gluon.jit
def _conv2d_fused_gluon_kernel(x_ptr, w1_desc, w2_desc, b_ptr, y_ptr, e_ptr, r_ptr, n_rows, NWG: gl.constexpr,
                               REGS: gl.constexpr, C: gl.constexpr, H: gl.constexpr, W: gl.constexpr,
                               OH: gl.constexpr, OW: gl.constexpr, C_OUT: gl.constexpr, PH: gl.constexpr,
                               PW: gl.constexpr, SH: gl.constexpr, SW: gl.constexpr, KHF: gl.constexpr,
                               KWF: gl.constexpr, HAS_BIAS: gl.constexpr, OUT_CL: gl.constexpr, EPILOGUE: gl.constexpr,
                               LLVM_OPT: gl.constexpr):
    """A persistent program an SM: the packed weight [C_out, K] loaded once by TMA into shared memory as K steps of 16,
    in columns N1 + N2, then NWG MMA warpgroups (1 or 2: three spill) each on its share of the output rows (_window),
    each with its two store warps (_store_rows), which apply the epilogue chain EPILOGUE (kernels/epilogue.code; 0:
    none) with its vectors at e_ptr and its residual at r_ptr. REGS: an MMA warpgroup's registers a thread, which
    warp_specialize sets (setmaxnreg) from the launch's (fused_gluon.LAUNCH_REGISTERS). LLVM_OPT: the level the
    binary is compiled at (kernels/llvm_opt; a constexpr so that levels never share a cache entry)."""
    gl.static_assert(KHF == 3, "the window holds three rows: smaller kernels are folded with zero rows to 3")
    gl.static_assert(NWG <= 2, "one or two MMA warpgroups: three spill (168 registers a thread)")
    KSTEPS: gl.constexpr = KHF * KWF * C
    # the weight in the input's dtype: 162 KB in float32, 81 KB in 16 bits
    w1_res = gl.allocate_shared_memory(x_ptr.dtype.element_ty, [KSTEPS, N1, BLOCK_K], w1_desc.layout)
    w2_res = gl.allocate_shared_memory(x_ptr.dtype.element_ty, [KSTEPS, N2, BLOCK_K], w2_desc.layout)
    wbar = gl.allocate_shared_memory(gl.int64, [1, 1], mbarrier.MBarrierLayout())
    # A finished row of each MMA warpgroup in float32, [column, channel] (24 KB), the columns contiguous and swizzled
    # in fours by the channel's row of 8 so that the MMA layout's writes and the store warps' reads of 32 columns of a
    # channel meet 32 banks. Two warpgroups' with the weight: 211 KB in float32 (past the 75 % carveout asked,
    # fused_gluon.CARVEOUT, which the driver raises to fit), 130 KB in 16 bits
    out_layout: gl.constexpr = gl.SwizzledSharedLayout(4, 1, 8, order=[0, 1])
    o1_0 = gl.allocate_shared_memory(gl.float32, [BLOCK_M, N1], out_layout)
    o2_0 = gl.allocate_shared_memory(gl.float32, [BLOCK_M, N2], out_layout)
    bias_s = gl.allocate_shared_memory(gl.float32, [128], gl.SwizzledSharedLayout(1, 1, 1, order=[0]))
    if HAS_BIAS:  # staged once for the store warps (read from global memory for each chunk, they stalled on it)
        ch = gl.arange(0, 128, layout=gl.BlockedLayout([1], [32], [4], [0]))
        bias_s.store(gl.load(b_ptr + ch, mask=ch < C_OUT, other=0.0).to(gl.float32))
    full = gl.allocate_shared_memory(gl.int64, [NWG, 1], mbarrier.MBarrierLayout())  # a row handed over
    empty = gl.allocate_shared_memory(gl.int64, [NWG, 1], mbarrier.MBarrierLayout())  # its buffer read
    for who in gl.static_range(NWG):
        mbarrier.init(full.index(who), count=1)
        mbarrier.init(empty.index(who), count=1)
    mbarrier.init(wbar.index(0), count=1)
    mbarrier.expect(wbar.index(0), KSTEPS * (w1_desc.block_type.nbytes + w2_desc.block_type.nbytes))
    for t in gl.static_range(KSTEPS):
        _tma_load(w1_desc, [0, t * BLOCK_K], wbar.index(0), w1_res.index(t))
        _tma_load(w2_desc, [N1, t * BLOCK_K], wbar.index(0), w2_res.index(t))
    # The argument tuples are spelled out (concatenated, the constexprs reach _window as runtime values: triton 3.6),
    # and each warpgroup's buffers allocated on their own (triton 3.6 refuses a 3-d buffer's index() as a 2-d view)
    if NWG == 1:
        gl.warp_specialize([
            (_window, (x_ptr, w1_res, w2_res, wbar, o1_0, o2_0, full, empty, n_rows, 0, NWG, C, H, W, OH, OW, PH, PW,
                       SH, SW, KWF)),
            (_store_rows, (o1_0, o2_0, full, empty, bias_s, y_ptr, e_ptr, r_ptr, n_rows, 0, NWG, OH, OW, C_OUT,
                            HAS_BIAS, OUT_CL, EPILOGUE)),
        ], [STORE_WARPS], [STORE_REGS])
    else:
        o1_1 = gl.allocate_shared_memory(gl.float32, [BLOCK_M, N1], out_layout)
        o2_1 = gl.allocate_shared_memory(gl.float32, [BLOCK_M, N2], out_layout)
        gl.warp_specialize([
            (_window, (x_ptr, w1_res, w2_res, wbar, o1_0, o2_0, full, empty, n_rows, 0, NWG, C, H, W, OH, OW, PH, PW,
                       SH, SW, KWF)),
            (_window, (x_ptr, w1_res, w2_res, wbar, o1_1, o2_1, full, empty, n_rows, 1, NWG, C, H, W, OH, OW, PH, PW,
                       SH, SW, KWF)),
            (_store_rows, (o1_0, o2_0, full, empty, bias_s, y_ptr, e_ptr, r_ptr, n_rows, 0, NWG, OH, OW, C_OUT,
                            HAS_BIAS, OUT_CL, EPILOGUE)),
            (_store_rows, (o1_1, o2_1, full, empty, bias_s, y_ptr, e_ptr, r_ptr, n_rows, 1, NWG, OH, OW, C_OUT,
                            HAS_BIAS, OUT_CL, EPILOGUE)),
        ], [4, STORE_WARPS, STORE_WARPS], [REGS, STORE_REGS, STORE_REGS])


def weight_layouts(dtype=gl.float32) -> tuple:
    """The shared-memory layouts of the weight's two column tiles, [N1, 16] and [N2, 16], in `dtype` (Gluon's)."""
    return (gl.NVMMASharedLayout.get_default_for([N1.value, BLOCK_K.value], dtype),
            gl.NVMMASharedLayout.get_default_for([N2.value, BLOCK_K.value], dtype))


GL_DTYPES = {"float32": gl.float32, "bfloat16": gl.bfloat16, "float16": gl.float16}


def descriptors(wp) -> tuple:
    """TMA descriptors of the packed weight [N1 + N2, K] (fused_gluon.pack_weight) in its two column tiles."""
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    l1, l2 = weight_layouts(GL_DTYPES[str(wp.dtype).removeprefix("torch.")])
    return (TensorDescriptor.from_tensor(wp, [N1.value, BLOCK_K.value], l1),
            TensorDescriptor.from_tensor(wp, [N2.value, BLOCK_K.value], l2))
