"""Issue 13, session 19: does this Triton's TMA round fp32 to TF32 on load (TensorDescriptor(round_f32_to_tf32=True),
Triton 3.9's tensor descriptors), and how does it break ties? If it does so to even, an nhwc kernel could take its A
tiles rounded by TMA straight from shared memory (no trip through registers, nhwc_preround's speed without its
rounding pass). Loads tie values and random values through such a descriptor, stores them back, and compares the bits
with rounding to nearest (ties to even, ties away) and truncation.

Measured (H200): triton 3.6.0's TensorDescriptor has no such option (docs/evidence/h200_issue13_nchw_tma.txt); not
run where it exists.

    python benchmarks/probe_tma_tf32.py
"""

from __future__ import annotations

import inspect
import sys
from pathlib import Path

import torch
import triton
import triton.language as tl

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from convtune.kernels.precision import round_to_tf32, round_to_tf32_even


@triton.jit
def _copy(desc, y_ptr, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    x = desc.load([pid * BLOCK, 0])
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offs[:, None] * 16 + tl.arange(0, 16)[None, :], x)


def main() -> None:
    from triton.tools.tensor_descriptor import TensorDescriptor

    print(torch.cuda.get_device_name(), "triton", triton.__version__)
    if "round_f32_to_tf32" not in inspect.signature(TensorDescriptor).parameters:
        print("this Triton's TensorDescriptor has no round_f32_to_tf32")
        return
    g = torch.Generator(device="cuda").manual_seed(19)
    x = torch.randn(4096, 16, generator=g, device="cuda")
    bits = x.view(torch.int32)
    bits[:1024] = (bits[:1024] & ~0x1FFF) | 0x1000  # exact ties: the 13 dropped bits are 1000000000000
    y = torch.empty_like(x)
    _copy[(4096 // 64,)](TensorDescriptor.from_tensor(x, [64, 16], round_f32_to_tf32=True), y, BLOCK=64)
    torch.cuda.synchronize()
    trunc = (bits & -8192).view(torch.float32)
    for name, ref in (("ties to even", round_to_tf32_even(x)), ("ties away", round_to_tf32(x)), ("truncation", trunc)):
        same_ties = bool(torch.equal(y[:1024], ref[:1024]))
        same_rest = bool(torch.equal(y[1024:], ref[1024:]))
        print(f"{name:13s}: ties equal {same_ties}, random values equal {same_rest}")
    print("unchanged fp32:", bool(torch.equal(y, x)))


if __name__ == "__main__":
    main()
