"""GPU check of the compiled TF32 roundings (run by tests/test_gpu.py in a subprocess, without the interpreter): the
in-kernel roundings give the host roundings' bits on 2**22 random finite floats (a fifth moved onto a rounding tie) and
on edge values: ties away (round_tf32) = round_to_tf32; ties to even, both PTX's cvt.rn.tf32.f32 (what compiled
kernels run) and the integer twin (what the interpreter runs) = round_to_tf32_even. Prints 'ok' at the end."""

import torch
import triton
import triton.language as tl

from convtune.kernels import precision
from convtune.kernels.precision import (round_tf32, round_tf32_even_bits, round_tf32_even_ptx, round_to_tf32,
                                        round_to_tf32_even)

assert not precision.INTERPRETED and precision.round_tf32_even is round_tf32_even_ptx


@triton.jit
def _apply(x_ptr, y_ptr, n, FN: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(y_ptr + offs, FN(tl.load(x_ptr + offs, mask=mask)), mask=mask)


g = torch.Generator(device="cuda").manual_seed(15)
bits = torch.randint(-2**31, 2**31 - 1, (2**22,), dtype=torch.int64, generator=g, device="cuda").to(torch.int32)
bits[::5] = (bits[::5] & -8192) | 0x1000  # on a tie
edges = torch.tensor([0, -2**31, 1, 0x1000, 0x3000, 0x7F7FFFFF, 0x7F7FF000, -0x00801000, 0x007FF000, 0x3F801000,
                      0x3F803000, 0x3F800FFF, 0x3F801001], dtype=torch.int32, device="cuda")
x = torch.cat([bits, edges]).view(torch.float32)
x = torch.where(torch.isfinite(x), x, torch.ones_like(x))
bad = []
for fn, host in ((round_tf32, round_to_tf32), (round_tf32_even_ptx, round_to_tf32_even),
                 (round_tf32_even_bits, round_to_tf32_even)):
    y = torch.empty_like(x)
    _apply[(triton.cdiv(x.numel(), 4096),)](x, y, x.numel(), FN=fn, BLOCK=4096)
    differ = int((y.view(torch.int32) != host(x).view(torch.int32)).sum())
    print(f"{fn.fn.__name__:22s} against {host.__name__:20s}: {differ} of {x.numel()} differ")
    if differ:
        bad.append(fn.fn.__name__)
assert not bad, bad
print("ok")
