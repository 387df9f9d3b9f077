"""Issue 13, session 15: what breaking TF32 ties to even costs nhwc_igemm, which rounds its input tiles in the K loop.
gpu_session15d's table had nhwc_igemm 6-7 % slower on alexnet_conv5 and resnet50_layer2_3x3 (channels_last) than the
table before (ties away: 2 integer operations an element; ties to even: 4), and no slower on vgg16_conv3_2.

One process per rounding (`--rounding even|bits|away|asm`; the kernel's rounding function is swapped before its first
compile): nhwc_igemm at the channels_last pins of the three layers, each timed and compared with the exact sum of the
operands rounded by the rule. `asm` is PTX's own cvt.rn.tf32.f32 (ties to even, one instruction; sm_90). Since this
probe ran, `even` is that instruction too (precision.round_tf32_even where Triton compiles) and `bits` the integer one.
Prediction: away and asm level, the integer ties-to-even 0-5 % slower; asm bit for bit equal to the integer version.

    for r in even away asm even away asm; do python benchmarks/probe_round_cost.py --rounding $r; done
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
import torch.nn.functional as F
import triton
import triton.language as tl

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "benchmarks"))

from probe_kernels import load_problem

from convtune.kernels import Meta
from convtune.kernels import nhwc_igemm
from convtune.kernels.precision import round_tf32, round_tf32_even_bits, round_to_tf32, round_to_tf32_even
from convtune.measure import bench
from convtune.measure.bench import TimingSettings
from convtune.measure.one_config import make_inputs


@triton.jit
def round_tf32_asm(x):
    bits = tl.inline_asm_elementwise("cvt.rn.tf32.f32 $0, $1;", "=r,f", [x], dtype=tl.int32, is_pure=True, pack=1)
    return bits.to(tl.float32, bitcast=True)


PINS = {"alexnet_conv5": Meta(64, 256, 32, 4, 3), "resnet50_layer2_3x3": Meta(64, 128, 32, 4, 3),
        "vgg16_conv3_2": Meta(64, 256, 32, 4, 3)}


def main() -> None:
    rounding = sys.argv[sys.argv.index("--rounding") + 1]
    nhwc_igemm.round_tf32_even = {"even": nhwc_igemm.round_tf32_even, "bits": round_tf32_even_bits, "away": round_tf32,
                                  "asm": round_tf32_asm}[rounding]
    host = round_to_tf32 if rounding == "away" else round_to_tf32_even
    dev = torch.device("cuda")
    torch.backends.cudnn.allow_tf32 = True
    fast = TimingSettings(rounds=7, reps=20, warmup=3)
    for name, meta in PINS.items():
        p = load_problem(name)
        x, w, b = make_inputs(p, 1, dev)
        x = x.contiguous(memory_format=torch.channels_last)
        out = torch.empty(p.output_shape, device=dev).contiguous(memory_format=torch.channels_last)
        call = nhwc_igemm.prepared(x, w, b, p.stride, p.padding, p.dilation, meta, "tf32", out=out)
        call()
        torch.cuda.synchronize()
        exact = F.conv2d(host(x).double(), host(w).double(), None if b is None else b.double(), p.stride, p.padding)
        theirs = F.conv2d(x, w, b, p.stride, p.padding)
        ms = bench.time_gpu(call, fast, dev).median_ms
        print(f"{rounding:5s} {name:20s} {meta.short():18s} {ms:.4f} ms · vs its rule's exact sum "
              f"{(out.double() - exact).abs().max().item():.1e} · allclose to torch "
              f"{bool(torch.allclose(out, theirs, atol=1e-4, rtol=1e-4))} · output sum {out.double().sum().item():.6f}",
              flush=True)


if __name__ == "__main__":
    main()
