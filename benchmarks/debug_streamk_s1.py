"""Issue 13, session 26 (debugging, not evidence of speed): `convtune.verify --variants nhwc_streamk` found 4 of 240
binaries wrong on the H200 (its one-time check refused them), all at num_stages 1 with C_in not a multiple of 4 (the
weight by tl.load); the interpreter gives the right sums on the same shapes. This runs those four, and each at two
stages, three ways: nhwc_streamk unsplit (every tile whole, its K loop in the helper with runtime bounds), split as the
one-time check splits, and nhwc_igemm at the same tile; 3 launches each, max |diff| from float64 relative to its max;
the two nhwc_streamk ways at LLVM O3 and O0 (kernels/llvm_opt.py: the first GPU run had the kernel missing from
llvm_opt.KERNELS, so its "O0" retry was compiled at O3 again).

    python benchmarks/debug_streamk_s1.py
"""

import dataclasses
import itertools
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
import triton

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
from convtune.kernels import Meta, llvm_opt, nhwc_igemm, nhwc_streamk as sk  # noqa: E402
from convtune.kernels.common import geometry  # noqa: E402

CASES = [  # n, c, h, w, k, kh, kw, stride, padding, dilation, meta, precision, out channels_last
    (4, 2, 17, 51, 2, 1, 2, (3, 5), (1, 1), (1, 1), Meta(128, 16, 64, 8, 1), "tf32_trunc", True),
    (16, 55, 52, 35, 40, 5, 3, (4, 2), (4, 5), (1, 2), Meta(64, 64, 64, 2, 1), "tf32x3", False),
    (8, 3, 74, 53, 2, 2, 3, (3, 2), (0, 1), (2, 2), Meta(128, 16, 64, 2, 1), "ieee", True),
    (4, 6, 80, 49, 451, 5, 2, (5, 4), (4, 2), (1, 2), Meta(256, 32, 32, 2, 1), "tf32_trunc", False),
]
print(torch.cuda.get_device_name(), torch.__version__, flush=True)
for n, c, h, w, k, kh, kw, s, p, d, meta0, prec, out_cl in CASES:
    for meta in (meta0, dataclasses.replace(meta0, num_stages=2)):
        gen = torch.Generator(device="cuda").manual_seed(1)
        x = torch.rand(n, c, h, w, device="cuda", generator=gen).contiguous(memory_format=torch.channels_last)
        wt = torch.rand(k, c, kh, kw, device="cuda", generator=gen) - 0.5
        b = torch.rand(k, device="cuda", generator=gen)
        g = geometry(x, wt, s, p, d)
        ref = F.conv2d(x.double(), wt.double(), b.double(), s, p, d)
        fmt = torch.channels_last if out_cl else torch.contiguous_format
        plan = sk.make_plan(g, True, meta, prec, out_cl)
        tiles = triton.cdiv(g.n * g.oh * g.ow, meta.BLOCK_M) * triton.cdiv(k, meta.BLOCK_N)
        scheds = {"streamk unsplit": sk.Schedule(tiles),
                  "streamk split": sk.check_schedule(tiles, plan.steps, plan.constexprs["GRAIN"])}
        errs = {}
        for (label, sched), level in itertools.product(scheds.items(), ("O3", "O0")):
            e = []
            for _ in range(3):
                out = torch.full((n, k, g.oh, g.ow), float("nan"), device="cuda").contiguous(memory_format=fmt)
                with llvm_opt.compiling_at(level):
                    sk._launch(plan.constexprs, sched, x, sk.pack_weight(wt, plan.rounds), b, out, g.n * g.oh * g.ow,
                               level)
                torch.cuda.synchronize()
                e.append(round(float(((out.double() - ref).abs().max() / ref.abs().max())), 7))
            errs[f"{label} at {level} {sched}"] = e
        e = []
        for _ in range(3):
            out = torch.full((n, k, g.oh, g.ow), float("nan"), device="cuda").contiguous(memory_format=fmt)
            try:
                nhwc_igemm.launch(x, wt, b, s, p, d, meta, prec, out=out)
                torch.cuda.synchronize()
                e.append(round(float(((out.double() - ref).abs().max() / ref.abs().max())), 7))
            except Exception as ex:  # noqa: BLE001 - a refusal is a result here
                e.append(f"{type(ex).__name__}")
        errs["nhwc_igemm"] = e
        print(f"n={n} c={c} {kh}x{kw} s{s} d{d} {meta.short()} {prec} out_cl={out_cl}", flush=True)
        for label, e in errs.items():
            print(f"   {label}: {e}", flush=True)
