"""The Gluon kernel of benchmarks/probe_fused_window.py (issue 13, session 21): fused_gluon's gather and MMAs, each
gathered A operand used for three output rows instead of one.

In fused_gluon (kernels/fused_gluon_kernel.py) output row oh reads folded input rows oh, oh + 1, oh + 2 (its folded
kernel rows a = 0, 1, 2): a warpgroup gathers 9 A operands (3 folded rows × 3 tap columns) for a row's 9 taps, and
every folded row is gathered three times, once for each output row that reads it. Here a warpgroup walks down a band
of output rows of one image and gathers each folded row once: folded row f, tap column b, is tap (2, b) of row
f - 2, tap (1, b) of row f - 1 and tap (0, b) of row f, so it feeds three accumulators (rows f - 2, f - 1, f); after
row f's three columns row f - 2 is complete and stored, and the accumulators move up one row. A gather then feeds 3x
the MMAs (18 instead of 6), for the same registers a gather; the cost is three accumulators (144 registers at 96
output channels) instead of one, and a band's first two and last two steps, whose partial rows outside the band are
computed and dropped (2 steps of MMAs a band). Each row's products are summed in the order fused_gluon sums them
(tap row a, tap column b, channel c), so the output is fused_gluon's bit for bit.

The folded kernel is always 3 rows here (smaller kernels' weights are folded with zero rows to 3), so the window is
three accumulators. Each warpgroup takes its own contiguous range of the batch's N·OH output rows, in bands that end at
its range's end or an image's last row.
"""

from __future__ import annotations

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import mbarrier, warpgroup_mma, warpgroup_mma_wait

from convtune.kernels import fused_gluon_kernel as lib

_tma_load = lib._tma_load
_round_tf32 = lib._round_tf32
BLOCK_M = gl.constexpr(64)
BLOCK_K = gl.constexpr(16)
N1 = gl.constexpr(64)
N2 = gl.constexpr(32)
KHF_WINDOW = 3  # folded kernel rows: the window's accumulators


@gluon.jit
def _prefetch_folded(x_ptr, img, f, live, C: gl.constexpr, H: gl.constexpr, W: gl.constexpr, PH: gl.constexpr,
                     SH: gl.constexpr, L1: gl.constexpr = False):
    """Into L2 (L1: into L1): folded input row f of image img (its SH input rows of every channel), one 128-byte line
    a thread."""
    LINES: gl.constexpr = (W * 4 + 127) // 128
    gl.static_assert(C * SH * LINES <= 128, "one line a thread")
    layout: gl.constexpr = gl.BlockedLayout([1], [32], [4], [0])
    line = gl.arange(0, 128, layout=layout)
    c = line // (SH * LINES)
    h = SH * f - PH + (line // LINES) % SH
    ok = (line < C * SH * LINES) & (h >= 0) & (h < H) & live
    at = gl.where(ok, (img.to(gl.int64) * C + c) * (H * W) + h * W + (line % LINES) * 32, 0)
    if L1:
        gl.inline_asm_elementwise("prefetch.global.L1 [$1]; mov.u32 $0, 0;", "=r,l", [x_ptr + at], dtype=gl.int32,
                                  is_pure=False, pack=1)
    else:
        gl.inline_asm_elementwise("prefetch.global.L2 [$1]; mov.u32 $0, 0;", "=r,l", [x_ptr + at], dtype=gl.int32,
                                  is_pure=False, pack=1)


@gluon.jit
def _gather(x_at, col, rows_r, img, f, b, live, C: gl.constexpr, H: gl.constexpr, W: gl.constexpr,
            PH: gl.constexpr, PW: gl.constexpr, SH: gl.constexpr, SW: gl.constexpr):
    """Folded row f, tap column b of image img as C K steps of 16: element [ow, 4r + s] of step c is
    x[img, c, SH·f + r - PH, SW·(ow + b) + s - PW],
            zero outside the input (fused_gluon_kernel._gather with f = oh + a)."""
    h0 = SH * f - PH
    w_at = col + SW * b
    keep = (w_at >= 0) & (w_at < W) & (rows_r + h0 >= 0) & (rows_r + h0 < H) & live
    p = x_at + (img.to(gl.int64) * (C * H * W) + (h0 * W + SW * b - PW))
    a0 = gl.load(p, mask=keep, other=0.0)
    a1 = gl.load(p + H * W, mask=keep, other=0.0)
    a2 = gl.load(p + 2 * H * W, mask=keep, other=0.0)
    return a0, a1, a2


@gluon.jit
def _window(x_ptr, w1_res, w2_res, wbar, b_ptr, y_ptr, n_rows, WHO: gl.constexpr, NWG: gl.constexpr,
            C: gl.constexpr, H: gl.constexpr, W: gl.constexpr, OH: gl.constexpr, OW: gl.constexpr,
            C_OUT: gl.constexpr, PH: gl.constexpr, PW: gl.constexpr, SH: gl.constexpr, SW: gl.constexpr,
            KWF: gl.constexpr, HAS_BIAS: gl.constexpr, OUT_CL: gl.constexpr, AHEAD: gl.constexpr,
            ABLATE: gl.constexpr, L1AHEAD: gl.constexpr, STORE_T: gl.constexpr):
    """Three rows a gather (the first GPU run, 0.313 ms): the window's accumulators move up a row after each step. As
    compiled, every wgmma waits for the one before (ptxas 13.4 here: "wgmma.mma_async instructions are serialized
    due to insufficient register resources for the wgmma pipeline"): six accumulators (144 registers) and the
    copies that move them. On the H200 (Triton 3.6) they do not wait: 0.3123-0.3136 ms, against 0.322 for the library.
    ABLATE, to time what the call spends where (its output then wrong): 1 stores only a band's last row, 2 gathers
    nothing after the first column (the MMAs reuse its registers). L1AHEAD > 0: folded row f + L1AHEAD is also
    prefetched into L1 at step f (NCU: the gathers' L1 hit rate 39 %, against the library's 84 %, and waits on them
    the first stall reason). STORE_T: an NCHW output row is stored from a layout with 32 consecutive columns of one
    channel a warp (the accumulators converted through shared memory), not the MMA's (8 columns × 4 channels)."""
    gl.static_assert(C == 3, "the gather names three channels' K steps")
    mma: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, N1, 8])
    mma2: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, N2, 8])
    dot_a: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=mma, k_width=1)
    dot_a2: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=mma2, k_width=1)
    wg = gl.program_id(0) * NWG + WHO
    n_wg = gl.num_programs(0) * NWG
    lo = (wg * n_rows) // n_wg
    hi = ((wg + 1) * n_rows) // n_wg

    ow = gl.expand_dims(gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, dot_a)), 1)
    k = gl.expand_dims(gl.arange(0, BLOCK_K, layout=gl.SliceLayout(0, dot_a)), 0)
    rows_r = k // SW
    x_at = x_ptr + (rows_r * W + SW * ow + k % SW)
    col = gl.where(ow < OW, SW * ow + k % SW - PW, W + 2 * SW * KWF)

    mbarrier.wait(wbar.index(0), 0)
    r = lo
    c0, c1, c2 = _gather(x_at, col, rows_r, gl.minimum(r, n_rows - 1) // OH, r % OH, 0, r < hi, C, H, W, PH, PW,
                         SH, SW)
    while r < hi:
        img = r // OH
        oh0 = r % OH
        end = gl.minimum(hi, (img + 1) * OH)
        acc_a = gl.zeros([BLOCK_M, N1], gl.float32, mma)
        acc_a2 = gl.zeros([BLOCK_M, N2], gl.float32, mma2)
        acc_b = gl.zeros([BLOCK_M, N1], gl.float32, mma)
        acc_b2 = gl.zeros([BLOCK_M, N2], gl.float32, mma2)
        acc_c = gl.zeros([BLOCK_M, N1], gl.float32, mma)
        acc_c2 = gl.zeros([BLOCK_M, N2], gl.float32, mma2)
        steps = end - r + 2
        for i in range(steps):
            f = oh0 + i
            if AHEAD > 0:
                _prefetch_folded(x_ptr, img, f + AHEAD, i + AHEAD < steps, C, H, W, PH, SH)
            if L1AHEAD > 0:
                _prefetch_folded(x_ptr, img, f + L1AHEAD, i + L1AHEAD < steps, C, H, W, PH, SH, True)
            for b in range(KWF):
                # the gather ahead: this row's next column, the next folded row's first, or the next band's first
                last_b = b + 1 >= KWF
                wrap = (last_b & (i + 1 >= steps)).to(gl.int32)
                g_img = img + wrap * (end // OH - img)
                g_f = (f + last_b.to(gl.int32)) * (1 - wrap) + wrap * (end % OH)
                if ABLATE == 2:
                    m0 = c0
                    m1 = c1
                    m2 = c2
                else:
                    m0, m1, m2 = _gather(x_at, col, rows_r, gl.minimum(g_img, n_rows // OH - 1), g_f, (b + 1) % KWF,
                                         (wrap == 0) | (end < hi), C, H, W, PH, PW, SH, SW)
                a0 = _round_tf32(c0)
                a1 = _round_tf32(c1)
                a2 = _round_tf32(c2)
                b0 = gl.convert_layout(a0, dot_a2, assert_trivial=True)
                b1 = gl.convert_layout(a1, dot_a2, assert_trivial=True)
                b2 = gl.convert_layout(a2, dot_a2, assert_trivial=True)
                ta = ((2 * KWF + b) * C)  # tap (2, b): row f - 2
                tb = ((KWF + b) * C)  # tap (1, b): row f - 1
                tc = b * C  # tap (0, b): row f
                acc_a = warpgroup_mma(a0, w1_res.index(ta).permute((1, 0)), acc_a, is_async=True)
                acc_a2 = warpgroup_mma(b0, w2_res.index(ta).permute((1, 0)), acc_a2, is_async=True)
                acc_b = warpgroup_mma(a0, w1_res.index(tb).permute((1, 0)), acc_b, is_async=True)
                acc_b2 = warpgroup_mma(b0, w2_res.index(tb).permute((1, 0)), acc_b2, is_async=True)
                acc_c = warpgroup_mma(a0, w1_res.index(tc).permute((1, 0)), acc_c, is_async=True)
                acc_c2 = warpgroup_mma(b0, w2_res.index(tc).permute((1, 0)), acc_c2, is_async=True)
                acc_a = warpgroup_mma(a1, w1_res.index(ta + 1).permute((1, 0)), acc_a, is_async=True)
                acc_a2 = warpgroup_mma(b1, w2_res.index(ta + 1).permute((1, 0)), acc_a2, is_async=True)
                acc_b = warpgroup_mma(a1, w1_res.index(tb + 1).permute((1, 0)), acc_b, is_async=True)
                acc_b2 = warpgroup_mma(b1, w2_res.index(tb + 1).permute((1, 0)), acc_b2, is_async=True)
                acc_c = warpgroup_mma(a1, w1_res.index(tc + 1).permute((1, 0)), acc_c, is_async=True)
                acc_c2 = warpgroup_mma(b1, w2_res.index(tc + 1).permute((1, 0)), acc_c2, is_async=True)
                acc_a = warpgroup_mma(a2, w1_res.index(ta + 2).permute((1, 0)), acc_a, is_async=True)
                acc_a2 = warpgroup_mma(b2, w2_res.index(ta + 2).permute((1, 0)), acc_a2, is_async=True)
                acc_b = warpgroup_mma(a2, w1_res.index(tb + 2).permute((1, 0)), acc_b, is_async=True)
                acc_b2 = warpgroup_mma(b2, w2_res.index(tb + 2).permute((1, 0)), acc_b2, is_async=True)
                acc_c = warpgroup_mma(a2, w1_res.index(tc + 2).permute((1, 0)), acc_c, is_async=True)
                acc_c2 = warpgroup_mma(b2, w2_res.index(tc + 2).permute((1, 0)), acc_c2, is_async=True)
                acc_a, acc_a2, acc_b, acc_b2, acc_c, acc_c2, a0, a1, a2, b0, b1, b2 = warpgroup_mma_wait(
                    0, deps=(acc_a, acc_a2, acc_b, acc_b2, acc_c, acc_c2, a0, a1, a2, b0, b1, b2))
                c0 = m0
                c1 = m1
                c2 = m2
            # row f - 2 has all its taps (from step 2 of the band on): store it, move the window up a row
            if ABLATE == 1:
                if i + 1 == steps:
                    _store_row(y_ptr, b_ptr, acc_a, acc_a2, img, f - 2, i >= 2, mma, mma2, OH, OW, C_OUT, HAS_BIAS,
                               OUT_CL)
            elif STORE_T and not OUT_CL:
                _store_row_t(y_ptr, b_ptr, acc_a, acc_a2, img, f - 2, i >= 2, OH, OW, C_OUT, HAS_BIAS)
            else:
                _store_row(y_ptr, b_ptr, acc_a, acc_a2, img, f - 2, i >= 2, mma, mma2, OH, OW, C_OUT, HAS_BIAS,
                           OUT_CL)
            acc_a = acc_b
            acc_a2 = acc_b2
            acc_b = acc_c
            acc_b2 = acc_c2
            acc_c = gl.zeros([BLOCK_M, N1], gl.float32, mma)
            acc_c2 = gl.zeros([BLOCK_M, N2], gl.float32, mma2)
        r = end


@gluon.jit
def _pairs(x_ptr, w1_res, w2_res, wbar, b_ptr, y_ptr, n_rows, WHO: gl.constexpr, NWG: gl.constexpr,
           C: gl.constexpr, H: gl.constexpr, W: gl.constexpr, OH: gl.constexpr, OW: gl.constexpr,
           C_OUT: gl.constexpr, PH: gl.constexpr, PW: gl.constexpr, SH: gl.constexpr, SW: gl.constexpr,
           KWF: gl.constexpr, HAS_BIAS: gl.constexpr, OUT_CL: gl.constexpr, AHEAD: gl.constexpr):
    """Two rows a gather: output rows q and q + 1 of one image read folded rows q … q + 3; folded row q + s, column b
    is tap (s, b) of row q (s ≤ 2) and tap (s - 1, b) of row q + 1 (s ≥ 1). 12 gathers for two rows instead of 18,
    four accumulators (96 registers). A band's odd last row is computed with a dropped partner row."""
    gl.static_assert(C == 3, "the gather names three channels' K steps")
    mma: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, N1, 8])
    mma2: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, N2, 8])
    dot_a: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=mma, k_width=1)
    dot_a2: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=mma2, k_width=1)
    wg = gl.program_id(0) * NWG + WHO
    n_wg = gl.num_programs(0) * NWG
    lo = (wg * n_rows) // n_wg
    hi = ((wg + 1) * n_rows) // n_wg

    ow = gl.expand_dims(gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, dot_a)), 1)
    k = gl.expand_dims(gl.arange(0, BLOCK_K, layout=gl.SliceLayout(0, dot_a)), 0)
    rows_r = k // SW
    x_at = x_ptr + (rows_r * W + SW * ow + k % SW)
    col = gl.where(ow < OW, SW * ow + k % SW - PW, W + 2 * SW * KWF)

    mbarrier.wait(wbar.index(0), 0)
    r = lo
    c0, c1, c2 = _gather(x_at, col, rows_r, gl.minimum(r, n_rows - 1) // OH, r % OH, 0, r < hi, C, H, W, PH, PW,
                         SH, SW)
    while r < hi:
        img = r // OH
        q = r % OH
        two = gl.minimum(hi, (img + 1) * OH) - r >= 2  # the pair's second row is the band's
        nxt = r + 1 + two.to(gl.int32)
        top = gl.zeros([BLOCK_M, N1], gl.float32, mma)
        top2 = gl.zeros([BLOCK_M, N2], gl.float32, mma2)
        bot = gl.zeros([BLOCK_M, N1], gl.float32, mma)
        bot2 = gl.zeros([BLOCK_M, N2], gl.float32, mma2)
        for s in gl.static_range(4):
            f = q + s
            if AHEAD > 0 and s < 2:  # the folded rows the pair AHEAD pairs on reads first
                _prefetch_folded(x_ptr, img, q + 2 * AHEAD + 2 + s, r < hi, C, H, W, PH, SH)
            for b in range(KWF):
                last_b = b + 1 >= KWF
                if s < 3:  # the gather ahead: this folded row's next column, or the next folded row's first
                    m0, m1, m2 = _gather(x_at, col, rows_r, img, f + last_b.to(gl.int32), (b + 1) % KWF, r < hi, C,
                                         H, W, PH, PW, SH, SW)
                else:  # ... or the next pair's first
                    lb = last_b.to(gl.int32)
                    g_img = img + lb * (gl.minimum(nxt, n_rows - 1) // OH - img)
                    g_f = f * (1 - lb) + lb * (nxt % OH)
                    m0, m1, m2 = _gather(x_at, col, rows_r, g_img, g_f, (b + 1) % KWF, (lb == 0) | (nxt < hi), C, H,
                                         W, PH, PW, SH, SW)
                a0 = _round_tf32(c0)
                a1 = _round_tf32(c1)
                a2 = _round_tf32(c2)
                b0 = gl.convert_layout(a0, dot_a2, assert_trivial=True)
                b1 = gl.convert_layout(a1, dot_a2, assert_trivial=True)
                b2 = gl.convert_layout(a2, dot_a2, assert_trivial=True)
                if s <= 2:  # tap (s, b) of row q
                    tt = (s * KWF + b) * C
                    top = warpgroup_mma(a0, w1_res.index(tt).permute((1, 0)), top, is_async=True)
                    top2 = warpgroup_mma(b0, w2_res.index(tt).permute((1, 0)), top2, is_async=True)
                    top = warpgroup_mma(a1, w1_res.index(tt + 1).permute((1, 0)), top, is_async=True)
                    top2 = warpgroup_mma(b1, w2_res.index(tt + 1).permute((1, 0)), top2, is_async=True)
                    top = warpgroup_mma(a2, w1_res.index(tt + 2).permute((1, 0)), top, is_async=True)
                    top2 = warpgroup_mma(b2, w2_res.index(tt + 2).permute((1, 0)), top2, is_async=True)
                if s >= 1:  # tap (s - 1, b) of row q + 1
                    tb = ((s - 1) * KWF + b) * C
                    bot = warpgroup_mma(a0, w1_res.index(tb).permute((1, 0)), bot, is_async=True)
                    bot2 = warpgroup_mma(b0, w2_res.index(tb).permute((1, 0)), bot2, is_async=True)
                    bot = warpgroup_mma(a1, w1_res.index(tb + 1).permute((1, 0)), bot, is_async=True)
                    bot2 = warpgroup_mma(b1, w2_res.index(tb + 1).permute((1, 0)), bot2, is_async=True)
                    bot = warpgroup_mma(a2, w1_res.index(tb + 2).permute((1, 0)), bot, is_async=True)
                    bot2 = warpgroup_mma(b2, w2_res.index(tb + 2).permute((1, 0)), bot2, is_async=True)
                top, top2, bot, bot2, a0, a1, a2, b0, b1, b2 = warpgroup_mma_wait(
                    0, deps=(top, top2, bot, bot2, a0, a1, a2, b0, b1, b2))
                c0 = m0
                c1 = m1
                c2 = m2
            if s == 2:  # row q has all its taps
                _store_row(y_ptr, b_ptr, top, top2, img, q, r < hi, mma, mma2, OH, OW, C_OUT, HAS_BIAS, OUT_CL)
        _store_row(y_ptr, b_ptr, bot, bot2, img, q + 1, two, mma, mma2, OH, OW, C_OUT, HAS_BIAS, OUT_CL)
        r = nxt


@gluon.jit
def _store_row(y_ptr, b_ptr, acc, acc2, img, oh, ok, mma: gl.constexpr, mma2: gl.constexpr, OH: gl.constexpr,
               OW: gl.constexpr, C_OUT: gl.constexpr, HAS_BIAS: gl.constexpr, OUT_CL: gl.constexpr):
    OHW: gl.constexpr = OH * OW
    on = gl.arange(0, N1, layout=gl.SliceLayout(0, mma))
    om = gl.expand_dims(gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, mma)), 1)
    on2 = N1 + gl.arange(0, N2, layout=gl.SliceLayout(0, mma2))
    om2 = gl.expand_dims(gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, mma2)), 1)
    if HAS_BIAS:
        acc = acc + gl.expand_dims(gl.load(b_ptr + on, mask=on < C_OUT, other=0.0), 0)
        acc2 = acc2 + gl.expand_dims(gl.load(b_ptr + on2, mask=on2 < C_OUT, other=0.0), 0)
    if OUT_CL:
        out_at = om * C_OUT + gl.expand_dims(on, 0)
        out_at2 = om2 * C_OUT + gl.expand_dims(on2, 0)
        y_row = y_ptr + (img.to(gl.int64) * (C_OUT * OHW) + oh * (OW * C_OUT))
    else:
        out_at = gl.expand_dims(on, 0) * OHW + om
        out_at2 = gl.expand_dims(on2, 0) * OHW + om2
        y_row = y_ptr + (img.to(gl.int64) * (C_OUT * OHW) + oh * OW)
    keep = (om < OW) & gl.expand_dims(on < C_OUT, 0) & ok
    keep2 = (om2 < OW) & gl.expand_dims(on2 < C_OUT, 0) & ok
    gl.store(y_row + out_at, acc, mask=keep, eviction_policy="evict_first")
    gl.store(y_row + out_at2, acc2, mask=keep2, eviction_policy="evict_first")


@gluon.jit
def _store_row_t(y_ptr, b_ptr, acc, acc2, img, oh, ok, OH: gl.constexpr, OW: gl.constexpr, C_OUT: gl.constexpr,
                 HAS_BIAS: gl.constexpr):
    """_store_row for an NCHW output from a layout whose warps store 32 consecutive columns of one channel (128
    contiguous bytes an instruction; the MMA layout's store covers 8 columns of 4 channels, 4 partial lines)."""
    OHW: gl.constexpr = OH * OW
    st: gl.constexpr = gl.BlockedLayout([1, 1], [32, 1], [1, 4], [0, 1])
    a = gl.convert_layout(acc, st)
    a2 = gl.convert_layout(acc2, st)
    on = gl.arange(0, N1, layout=gl.SliceLayout(0, st))
    on2 = N1 + gl.arange(0, N2, layout=gl.SliceLayout(0, st))
    om = gl.expand_dims(gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, st)), 1)
    if HAS_BIAS:
        a = a + gl.expand_dims(gl.load(b_ptr + on, mask=on < C_OUT, other=0.0), 0)
        a2 = a2 + gl.expand_dims(gl.load(b_ptr + on2, mask=on2 < C_OUT, other=0.0), 0)
    y_row = y_ptr + (img.to(gl.int64) * (C_OUT * OHW) + oh * OW)
    gl.store(y_row + gl.expand_dims(on, 0) * OHW + om, a, mask=(om < OW) & gl.expand_dims(on < C_OUT, 0) & ok,
             eviction_policy="evict_first")
    gl.store(y_row + gl.expand_dims(on2, 0) * OHW + om, a2, mask=(om < OW) & gl.expand_dims(on2 < C_OUT, 0) & ok,
             eviction_policy="evict_first")


@gluon.jit
def _conv2d_window_kernel(x_ptr, w1_desc, w2_desc, b_ptr, y_ptr, n_rows, NWG: gl.constexpr, REGS: gl.constexpr,
                          C: gl.constexpr, H: gl.constexpr, W: gl.constexpr, OH: gl.constexpr, OW: gl.constexpr,
                          C_OUT: gl.constexpr, PH: gl.constexpr, PW: gl.constexpr, SH: gl.constexpr,
                          SW: gl.constexpr, KHF: gl.constexpr, KWF: gl.constexpr, HAS_BIAS: gl.constexpr,
                          OUT_CL: gl.constexpr, LLVM_OPT: gl.constexpr, AHEAD: gl.constexpr,
                          ROWS: gl.constexpr, ABLATE: gl.constexpr, L1AHEAD: gl.constexpr,
                          STORE_T: gl.constexpr):
    """fused_gluon_kernel._conv2d_fused_gluon_kernel's frame (the weight resident,
            NWG warpgroups); ROWS a gather: 3 runs
    _window, 2 _pairs."""
    gl.static_assert(KHF == 3, "the window holds three rows: fold smaller kernels with zero rows to 3")
    KSTEPS: gl.constexpr = KHF * KWF * C
    w1_res = gl.allocate_shared_memory(gl.float32, [KSTEPS, N1, BLOCK_K], w1_desc.layout)
    w2_res = gl.allocate_shared_memory(gl.float32, [KSTEPS, N2, BLOCK_K], w2_desc.layout)
    wbar = gl.allocate_shared_memory(gl.int64, [1, 1], mbarrier.MBarrierLayout())
    mbarrier.init(wbar.index(0), count=1)
    mbarrier.expect(wbar.index(0), KSTEPS * (w1_desc.block_type.nbytes + w2_desc.block_type.nbytes))
    for t in gl.static_range(KSTEPS):
        _tma_load(w1_desc, [0, t * BLOCK_K], wbar.index(0), w1_res.index(t))
        _tma_load(w2_desc, [N1, t * BLOCK_K], wbar.index(0), w2_res.index(t))
    gl.static_assert(NWG <= 2, "one or two warpgroups: three spill (168 registers a thread)")
    if ROWS == 3:
        if NWG == 1:
            _window(x_ptr, w1_res, w2_res, wbar, b_ptr, y_ptr, n_rows, 0, NWG, C, H, W, OH, OW, C_OUT, PH, PW, SH,
                    SW, KWF, HAS_BIAS, OUT_CL, AHEAD, ABLATE, L1AHEAD, STORE_T)
        else:
            gl.warp_specialize([
                (_window, (x_ptr, w1_res, w2_res, wbar, b_ptr, y_ptr, n_rows, 0, NWG, C, H, W, OH, OW, C_OUT, PH, PW,
                           SH, SW, KWF, HAS_BIAS, OUT_CL, AHEAD, ABLATE, L1AHEAD, STORE_T)),
                (_window, (x_ptr, w1_res, w2_res, wbar, b_ptr, y_ptr, n_rows, 1, NWG, C, H, W, OH, OW, C_OUT, PH, PW,
                           SH, SW, KWF, HAS_BIAS, OUT_CL, AHEAD, ABLATE, L1AHEAD, STORE_T)),
            ], [4], [REGS])
    else:
        if NWG == 1:
            _pairs(x_ptr, w1_res, w2_res, wbar, b_ptr, y_ptr, n_rows, 0, NWG, C, H, W, OH, OW, C_OUT, PH, PW, SH,
                   SW, KWF, HAS_BIAS, OUT_CL, AHEAD)
        else:
            gl.warp_specialize([
                (_pairs, (x_ptr, w1_res, w2_res, wbar, b_ptr, y_ptr, n_rows, 0, NWG, C, H, W, OH, OW, C_OUT, PH, PW,
                          SH, SW, KWF, HAS_BIAS, OUT_CL, AHEAD)),
                (_pairs, (x_ptr, w1_res, w2_res, wbar, b_ptr, y_ptr, n_rows, 1, NWG, C, H, W, OH, OW, C_OUT, PH, PW,
                          SH, SW, KWF, HAS_BIAS, OUT_CL, AHEAD)),
            ], [4], [REGS])
