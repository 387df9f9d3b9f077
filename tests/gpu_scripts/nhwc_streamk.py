"""GPU check of nhwc_streamk (kernels/variants/nhwc_streamk.py): random convolutions (1x1 to 5x5, 16 to 384 channels, some
strided or dilated, either layout in and out, tf32 and ieee) at tiles of one and of two programs an SM, the split's
workers as the GPU says or forced (2 to 400), LAUNCHES launches each; then alexnet_conv5 and conv2 at their pinned
tiles, 12 launches each. A case is right when every launch is within RTOL of float64 on the kernel's own operands
(rounded to nearest TF32 for tf32), every launch gives the same bits (the parts are summed in worker order), no output
element is left unwritten (the output starts NaN), and it is within 1e-4 of nhwc_preround's unsplit output relative to
the output's largest magnitude; the suite problems must also pass KernelBench's allclose against torch. Prints each
case and the counts; any wrong case raises.

    python tests/gpu_scripts/nhwc_streamk.py [cases]
"""

import random
import sys

import torch
import torch.nn.functional as F

from convtune.kernels import Meta
from convtune.kernels.variants import nhwc_igemm, nhwc_streamk as sk
from convtune.kernels.conv_args import geometry
from convtune.kernels.precision import round_to_tf32_even

CASES = int(sys.argv[1]) if len(sys.argv) > 1 else 60
LAUNCHES = 4
RTOL = {"tf32": 1e-5, "ieee": 1e-5}
METAS = [Meta(128, 256, 32, 8, 4), Meta(64, 256, 32, 4, 3), Meta(128, 256, 32, 8, 3), Meta(128, 128, 32, 4, 3),
         Meta(128, 128, 32, 8, 3), Meta(64, 128, 32, 4, 3), Meta(64, 64, 32, 4, 3), Meta(128, 256, 16, 8, 4)]
SMS = torch.cuda.get_device_properties(0).multi_processor_count


def schedule(plan, compiled) -> sk.Schedule:
    slots = plan.slots if plan.slots is not None else sk.split_slots(sk.resident_programs(compiled), SMS)
    return sk.split_schedule(plan.tiles, plan.steps, plan.constexprs["GRAIN"], slots)


def check(label, x, wt, b, stride, padding, dilation, meta, precision, out_cl, slots, launches, judge=False):
    g = geometry(x, wt, stride, padding, dilation)
    fmt = torch.channels_last if out_cl else torch.contiguous_format
    outs = []
    for _ in range(launches):
        out = torch.full((g.n, g.c_out, g.oh, g.ow), float("nan"), device="cuda").contiguous(memory_format=fmt)
        launched = sk.launch(x, wt, b, stride, padding, dilation, meta, precision, out=out, slots=slots)
        outs.append(launched.out)
        compiled = launched.compiled
    unsplit = torch.empty_like(outs[0])
    nhwc_igemm.launch_preround(x, wt, b, stride, padding, dilation, meta, precision, out=unsplit)
    torch.cuda.synchronize()
    xr, wr = (round_to_tf32_even(x), round_to_tf32_even(wt)) if precision == "tf32" else (x, wt)
    ref = F.conv2d(xr.double(), wr.double(), None if b is None else b.double(), stride, padding, dilation)
    rels = [float((y.double() - ref).norm() / ref.norm()) for y in outs]
    same = all(torch.equal(outs[0], y) for y in outs[1:])
    written = not any(bool(y.isnan().any()) for y in outs)
    vs_unsplit = float((outs[0] - unsplit).abs().max() / ref.abs().max())
    plan = sk.make_plan(g, b is not None, meta, precision, out_cl, slots)
    sched = schedule(plan, compiled)
    judged = True
    if judge:
        theirs = F.conv2d(x, wt, b, stride, padding, dilation)
        judged = bool(torch.allclose(outs[0], theirs, atol=1e-4, rtol=1e-4))
    bad = max(rels) > RTOL[precision] or not same or not written or vs_unsplit > 1e-4 or not judged
    split = f"{sched.dp_tiles} whole + {sched.sk_tiles} split by {sched.workers}"
    print(f"{'WRONG' if bad else 'ok   '} {label} {meta.short()} {precision} slots {slots} ({split}): max rel "
          f"{max(rels):.1e}, launches {'the same' if same else 'DIFFER'}, {'all written' if written else 'NaN LEFT'}, "
          f"vs unsplit {vs_unsplit:.1e}{', judge ' + str(judged) if judge else ''}", flush=True)
    return bad, sched.workers > 0


def main() -> None:
    print(torch.cuda.get_device_name(), torch.__version__, flush=True)
    rng = random.Random(20261123)
    wrong, splits = [], 0
    for i in range(CASES):
        r = rng.choice([1, 3, 3, 5])
        c = rng.choice([16, 18, 32, 48, 64, 96, 128, 192, 256, 384])
        k = rng.choice([16, 48, 64, 96, 128, 192, 256, 320])
        n, h, w = rng.randint(1, 96), rng.randint(3, 28), rng.randint(3, 28)
        stride, dilation = rng.choice([1, 1, 1, 2]), rng.choice([1, 1, 1, 2])
        padding = dilation * (r // 2)
        if (h + 2 * padding - dilation * (r - 1) - 1) < 0 or (w + 2 * padding - dilation * (r - 1) - 1) < 0:
            continue
        meta = rng.choice(METAS)
        precision = rng.choice(["tf32", "tf32", "tf32", "ieee"])
        slots = rng.choice([None, None, rng.randint(2, 400)])
        gen = torch.Generator(device="cuda").manual_seed(i)
        x = torch.randn(n, c, h, w, device="cuda", generator=gen)
        if rng.random() < 0.5:
            x = x.contiguous(memory_format=torch.channels_last)
        wt = torch.randn(k, c, r, r, device="cuda", generator=gen) / (c * r * r) ** 0.5
        b = torch.randn(k, device="cuda", generator=gen) if rng.random() < 0.7 else None
        label = f"case {i:3d}: n={n} c={c} k={k} {r}x{r} {h}x{w} s{stride} d{dilation}"
        bad, did = check(label, x, wt, b, stride, padding, dilation, meta, precision, rng.random() < 0.5, slots,
                         LAUNCHES)
        splits += did
        if bad:
            wrong.append(label)
    for name, (n, c, k, r, h, metas) in {"alexnet_conv5": (256, 384, 256, 3, 13, [Meta(128, 256, 32, 8, 4),
                                                                                   Meta(64, 256, 32, 4, 3)]),
                                          "alexnet_conv2": (256, 96, 256, 5, 27, [Meta(128, 256, 32, 8, 4)])}.items():
        gen = torch.Generator(device="cuda").manual_seed(50)
        x = torch.randn(n, c, h, h, device="cuda", generator=gen)
        wt = torch.randn(k, c, r, r, device="cuda", generator=gen) / (c * r * r) ** 0.5
        b = torch.randn(k, device="cuda", generator=gen)
        for meta in metas:
            for x_in, out_cl in ((x, False), (x.contiguous(memory_format=torch.channels_last), True)):
                for slots in (None, SMS):
                    label = f"{name} {'channels_last' if out_cl else 'nchw'}"
                    bad, did = check(label, x_in, wt, b, 1, r // 2, 1, meta, "tf32", out_cl, slots, 12, judge=True)
                    splits += did
                    if bad:
                        wrong.append(f"{label} {meta.short()} slots {slots}")
    print(f"{len(wrong)} wrong; {splits} cases split")
    assert not wrong, wrong
    assert splits, "no case split"
    print("ok")


if __name__ == "__main__":
    main()
