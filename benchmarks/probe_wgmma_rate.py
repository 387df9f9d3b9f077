"""Issue 13, session 21: how fast Hopper's TF32 wgmma runs with its A operand in registers (as fused_gluon, nchw_igemm
and nhwc_igemm issue it) against A in shared memory, by the instruction's N and the MMAs issued between waits.

Why: fused_gluon's window variant (benchmarks/probe_fused_window.py of commit 84ce735; the library's kernel since
session 22) issues 3x the MMAs a gather and ran only 3 % faster
(0.313 against 0.323 ms on L1 #50), and with one warpgroup an SM as fast as the library's three (0.34 ms): about 48
cycles an SM for each m64k8 instruction of N 64 or 32, which the nominal TF32 rate (494 TFLOP/s dense, 32 and 16
cycles) does not explain. This times nothing but MMAs: WARPGROUPS warpgroups an SM (one 4-warp program each), each
issuing GROUP MMAs of m64 × N × k16 on one accumulator, then waiting for them, ITERS times; the A operand constant
(registers: `rs`; shared memory, K-major: `ss`), the B operand [N, 16] K-major in shared memory.

    python benchmarks/probe_wgmma_rate.py
"""

from __future__ import annotations

import torch
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import warpgroup_mma, warpgroup_mma_wait

ITERS = 2000


@gluon.jit
def _rate_kernel(out_ptr, ITERS: gl.constexpr, N: gl.constexpr, GROUP: gl.constexpr, RS: gl.constexpr):
    mma: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, N, 8])
    dot_a: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=mma, k_width=1)
    b_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([N, 16], gl.float32)
    a_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([64, 16], gl.float32)
    blocked: gl.constexpr = gl.BlockedLayout([1, 4], [8, 4], [4, 1], [1, 0])
    b_smem = gl.allocate_shared_memory(gl.float32, [N, 16], b_layout,
                                       gl.full([N, 16], 0.5, gl.float32, blocked))
    acc = gl.zeros([64, N], gl.float32, mma)
    if RS:
        a = gl.full([64, 16], 1.0, gl.float32, dot_a)
        for _ in range(ITERS):
            for _g in gl.static_range(GROUP):
                acc = warpgroup_mma(a, b_smem.permute((1, 0)), acc, is_async=True)
            acc, a = warpgroup_mma_wait(0, deps=(acc, a))
    else:
        a_smem = gl.allocate_shared_memory(gl.float32, [64, 16], a_layout,
                                           gl.full([64, 16], 1.0, gl.float32, blocked))
        for _ in range(ITERS):
            for _g in gl.static_range(GROUP):
                acc = warpgroup_mma(a_smem, b_smem.permute((1, 0)), acc, is_async=True)
            acc = warpgroup_mma_wait(0, deps=(acc,))
    gl.store(out_ptr + gl.program_id(0), gl.sum(gl.sum(acc, axis=1), axis=0))


def main() -> None:
    dev = torch.device("cuda")
    sms = torch.cuda.get_device_properties(dev).multi_processor_count
    print(torch.cuda.get_device_name(), sms, "SMs", flush=True)
    out = torch.empty(4 * sms, device=dev)
    print("| A | N | MMAs a wait | warpgroups an SM | ms | TFLOP/s | cycles an SM a k8 instruction (at the clock "
          "below) |")
    clock_ghz = torch.cuda.clock_rate(dev) / 1e3 if hasattr(torch.cuda, "clock_rate") else float("nan")
    for rs in (True, False):
        for n in (32, 64, 128, 256):
            for group in (2, 12):
                for wgs in (1, 2):
                    programs = wgs * sms
                    kernel = _rate_kernel[(programs,)]
                    kernel(out, ITERS, n, group, rs, num_warps=4)
                    torch.cuda.synchronize()
                    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                    times = []
                    for _ in range(5):
                        start.record()
                        kernel(out, ITERS, n, group, rs, num_warps=4)
                        stop.record()
                        torch.cuda.synchronize()
                        times.append(start.elapsed_time(stop))
                    ms = sorted(times)[2]
                    flop = programs * ITERS * group * 64 * n * 16 * 2
                    k8_per_sm = wgs * ITERS * group * 2
                    cycles = ms * 1e-3 * clock_ghz * 1e9 / k8_per_sm
                    print(f"| {'registers' if rs else 'shared'} | {n} | {group} | {wgs} | {ms:.3f} | "
                          f"{flop / ms / 1e9:.0f} | {cycles:.1f} |", flush=True)
    print(f"clock: {clock_ghz:.3f} GHz (torch.cuda.clock_rate: the SM clock the driver reports, not the one it ran)")


if __name__ == "__main__":
    main()
