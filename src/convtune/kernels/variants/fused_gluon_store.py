"""The store warps of `fused_gluon` (kernels/variants/fused_gluon_kernel.py imports them): each MMA warpgroup hands its
finished output rows (float32 sums) through shared memory to two warps of its own, which add the bias, apply the
epilogue chain (kernels/epilogue.apply_epilogue, called here with Gluon's layouts; in 16 bits it rounds each op's result
as torch's chain does) and store in the output's dtype and layout. The tile's shape lives here too, for both modules.
"""

from __future__ import annotations

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import mbarrier

from convtune.kernels.epilogue import apply_epilogue

# (the body from here is copied into KernelBench's export, ahead of the kernel's: fused_gluon.render_kernelbench)
# a barrier of the calling partition's warps: thread_barrier in triton 3.6, barrier from 3.9
_barrier = getattr(gl, "thread_barrier", None) or gl.barrier

# (constexpr objects: a jit function reads no other globals; .value is the int)
BLOCK_M = gl.constexpr(64)  # an output row a tile (OW ≤ 64): the M of one warpgroup's wgmma
N1 = gl.constexpr(64)  # the output channels as two MMAs sharing each A operand (tensor shapes are powers of two)
N2 = gl.constexpr(32)
# The store warps of each MMA warpgroup: 2 warps at 24 registers a thread, what two MMA warpgroups at 240 leave of the
# SM's 64 K (3 warpgroups' 504 a thread at the launch's 168: fused_gluon.LAUNCH_REGISTERS); they write a row 8
# channels at a time, the least a slice of its swizzled buffer may take (24 registers hold no more without spilling)
STORE_WARPS = gl.constexpr(2)
STORE_REGS = gl.constexpr(24)
CHUNK = gl.constexpr(8)


@gluon.jit
def _hand_over(o1, o2, full, empty, acc, acc2, j, WHO: gl.constexpr):
    """MMA warpgroup WHO's j-th finished row into its shared-memory buffer, for its store warps (_store_rows)."""
    mbarrier.wait(empty.index(WHO), (j & 1) ^ 1)  # they have read row j - 1 (for row 0 this passes at once)
    o1.store(acc)
    o2.store(acc2)
    _barrier()  # every thread's writes before the warpgroup's one arrive
    mbarrier.arrive(full.index(WHO))


@gluon.jit
def _store_chunk(buf, c: gl.constexpr, N0: gl.constexpr, ld: gl.constexpr, bias_s, row, e_ptr, r_row, OH: gl.constexpr,
                 OW: gl.constexpr, C_OUT: gl.constexpr, HAS_BIAS: gl.constexpr, OUT_CL: gl.constexpr,
                 EPILOGUE: gl.constexpr):
    """Channels N0 + c .. N0 + c + CHUNK of a row (columns c.. of `buf`) plus their bias, then the chain EPILOGUE
    (vectors at e_ptr, the residual's row at r_row), at `row`: in an NCHW output the row's channel 0, in a
    channels_last one its first column (_store_rows). The output (297 MB on L1 #50 in float32) is marked evict_last:
    against evict_first, 0.9664-0.9717 of its time on the H200 and 0.9748-0.9810 on the H100."""
    m = gl.expand_dims(gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, ld)), 1)
    ch = N0 + c + gl.arange(0, CHUNK, layout=gl.SliceLayout(0, ld))
    n = gl.expand_dims(ch, 0)
    v = buf.slice(c, CHUNK, dim=1).load(ld)
    if HAS_BIAS:
        v = v + gl.expand_dims(bias_s.slice(N0 + c, CHUNK).load(gl.SliceLayout(0, ld)), 0)
    mask = (m < OW) & (n < C_OUT)
    if EPILOGUE != 0:  # in 16 bits it rounds each op's result as torch's chain does
        if OUT_CL:
            offs = m * C_OUT + n
        else:
            offs = n * (OH * OW) + m
        v = apply_epilogue(v, e_ptr, r_row, ch, ch < C_OUT, offs, mask, C_OUT, EPILOGUE, row.dtype.element_ty)
    v = v.to(row.dtype.element_ty)  # the float32 sum plus the bias (and the chain), rounded once to the output's dtype
    # (the addresses as the kernel without an epilogue computed them: its binary is unchanged)
    if OUT_CL:
        gl.store(row + m * C_OUT + n, v, mask=mask, eviction_policy="evict_last")
    else:
        gl.store(row + n * (OH * OW) + m, v, mask=mask, eviction_policy="evict_last")


@gluon.jit
def _store_rows(o1, o2, full, empty, bias_s, y_ptr, e_ptr, r_ptr, n_rows, WHO: gl.constexpr, NWG: gl.constexpr,
                OH: gl.constexpr, OW: gl.constexpr, C_OUT: gl.constexpr, HAS_BIAS: gl.constexpr, OUT_CL: gl.constexpr,
                EPILOGUE: gl.constexpr):
    """The store warps of MMA warpgroup WHO: each row it hands over (the rows of its range, in order) to the output.
    An NCHW row is written 32 consecutive columns of one channel a warp instruction (128 contiguous bytes; from the
    MMA layout a store covers 8 columns of 4 channels, 4 partial lines: 8 % slower), a channels_last
    one 8 channels of 4 columns. Against the MMA warpgroups storing their own rows: L1 #50 (float32) 0.2416 ms against
    0.2730 on the H200, level on the H100 (docs/PERFORMANCE.md). The bias is staged in shared memory: read from global
    memory for each chunk, the store warps stalled on it. The residual of an `add` is read at the output's offsets in
    its own tensor (r_ptr), which has the output's layout."""
    wg = gl.program_id(0) * NWG + WHO
    n_wg = gl.num_programs(0) * NWG
    lo = (wg * n_rows) // n_wg
    hi = ((wg + 1) * n_rows) // n_wg
    if OUT_CL:
        ld: gl.constexpr = gl.BlockedLayout([1, 1], [4, 8], [STORE_WARPS, 1], [1, 0])  # lanes along the channels
    else:
        ld: gl.constexpr = gl.BlockedLayout([1, 1], [32, 1], [1, STORE_WARPS], [0, 1])  # lanes along the columns
    for r in range(lo, hi):
        mbarrier.wait(full.index(WHO), (r - lo) & 1)
        if OUT_CL:
            at = r.to(gl.int64) * (OW * C_OUT)
        else:
            img = r // OH
            at = img.to(gl.int64) * (C_OUT * OH * OW) + (r - img * OH) * OW
        row = y_ptr + at
        r_row = r_ptr + at
        for c in gl.static_range(0, N1, CHUNK):
            _store_chunk(o1, c, 0, ld, bias_s, row, e_ptr, r_row, OH, OW, C_OUT, HAS_BIAS, OUT_CL, EPILOGUE)
        for c in gl.static_range(0, N2, CHUNK):
            _store_chunk(o2, c, N1, ld, bias_s, row, e_ptr, r_row, OH, OW, C_OUT, HAS_BIAS, OUT_CL, EPILOGUE)
        _barrier()  # both warps' reads of the row before the one arrive that frees the buffer
        mbarrier.arrive(empty.index(WHO))
