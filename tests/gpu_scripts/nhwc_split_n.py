"""GPU check of nhwc_split_n (kernels/variants/nhwc_split_n.py): random convolutions (1x1 to 5x5, 16 to 384 channels in, 16 to
448 out, so that most leave channels over a tile's width; some strided or dilated; either layout in and out; tf32 and
ieee) at tiles of 64 to 256 channels, LAUNCHES launches each; then alexnet_conv4 and conv3 at M128-N256-w8-s4, 12
launches each, also under a CUDA graph and on a stream other than the default. A case is right when every launch is
within RTOL of float64 on the kernel's own operands (rounded to nearest TF32 for tf32; RTOL grows as the square root
of the sum's length past 512, as in nchw_igemm.py: the first run's one failure was a 5x5 kernel over 384 channels, a sum
9,600 long, 1.1e-5 off and bit for bit nhwc_preround's output), every launch gives the same bits, no output element is left unwritten (the output starts NaN), and the output equals nhwc_preround's at the same
K step bit for bit (each element's sum is the same K loop); the suite problems must also pass KernelBench's allclose
against torch. Prints each case and the counts; any wrong case raises.

    python tests/gpu_scripts/nhwc_split_n.py [cases]
"""

import random
import sys

import torch
import torch.nn.functional as F

from convtune.kernels import Meta
from convtune.kernels.variants import nhwc_igemm, nhwc_split_n as sn
from convtune.kernels.conv_args import geometry
from convtune.kernels.precision import round_to_tf32_even

CASES = int(sys.argv[1]) if len(sys.argv) > 1 else 60
LAUNCHES = 4
RTOL = {"tf32": 1e-5, "ieee": 1e-5}
METAS = [Meta(128, 256, 32, 8, 4), Meta(128, 256, 32, 8, 3), Meta(64, 256, 32, 4, 3), Meta(128, 128, 32, 4, 3),
         Meta(64, 64, 32, 4, 3), Meta(128, 256, 16, 8, 4)]


def check(label, x, wt, b, stride, padding, dilation, meta, precision, out_cl, launches, judge=False, call=None):
    """`call(out)`: how each launch is made (default: sn.launch on the current stream)."""
    g = geometry(x, wt, stride, padding, dilation)
    fmt = torch.channels_last if out_cl else torch.contiguous_format
    call = call or (lambda out: sn.launch(x, wt, b, stride, padding, dilation, meta, precision, out=out))
    outs = []
    for _ in range(launches):
        out = torch.full((g.n, g.c_out, g.oh, g.ow), float("nan"), device="cuda").contiguous(memory_format=fmt)
        call(out)
        outs.append(out)
    whole = torch.empty_like(outs[0])
    nhwc_igemm.launch_preround(x, wt, b, stride, padding, dilation, Meta(64, 64, meta.BLOCK_K, 4, 3), precision,
                               out=whole)
    torch.cuda.synchronize()
    xr, wr = (round_to_tf32_even(x), round_to_tf32_even(wt)) if precision == "tf32" else (x, wt)
    ref = F.conv2d(xr.double(), wr.double(), None if b is None else b.double(), stride, padding, dilation)
    rels = [float((y.double() - ref).norm() / ref.norm()) for y in outs]
    same = all(torch.equal(outs[0], y) for y in outs[1:])
    written = not any(bool(y.isnan().any()) for y in outs)
    as_preround = bool(torch.equal(outs[0], whole))
    judged = True
    if judge:
        theirs = F.conv2d(x, wt, b, stride, padding, dilation)
        judged = bool(torch.allclose(outs[0], theirs, atol=1e-4, rtol=1e-4))
    plan = sn.make_plan(g, b is not None, meta, precision, out_cl)
    parts = " + ".join(f"{p.n_count} at {p.meta.short()}" for p in plan.parts)
    tolerance = RTOL[precision] * max(1.0, wt[0].numel() / 512) ** 0.5
    bad = max(rels) > tolerance or not same or not written or not judged
    print(f"{'WRONG' if bad else 'ok   '} {label} {precision} ({parts}): max rel {max(rels):.1e}, launches "
          f"{'the same' if same else 'DIFFER'}, {'all written' if written else 'NaN LEFT'}, bits = nhwc_preround's "
          f"{as_preround}{', judge ' + str(judged) if judge else ''}", flush=True)
    return bad, len(plan.parts) == 2, as_preround


def graphed(x, wt, b, padding, meta):
    """Launches captured once in a CUDA graph (after a first, eager call: compile and check), then replayed."""
    def call(out):
        sn.launch(x, wt, b, 1, padding, 1, meta, "tf32", out=out)  # compiled and checked outside the capture
        torch.cuda.synchronize()
        out.fill_(float("nan"))
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            sn.launch(x, wt, b, 1, padding, 1, meta, "tf32", out=out)
        graph.replay()
    return call


def on_a_stream(x, wt, b, padding, meta):
    """Launches on a stream other than the default, the output read on the default stream after it."""
    stream = torch.cuda.Stream()

    def call(out):
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            sn.launch(x, wt, b, 1, padding, 1, meta, "tf32", out=out)
        torch.cuda.current_stream().wait_stream(stream)
    return call


def main() -> None:
    print(torch.cuda.get_device_name(), torch.__version__, flush=True)
    rng = random.Random(20261124)
    wrong, two, equal, total = [], 0, 0, 0
    for i in range(CASES):
        r = rng.choice([1, 3, 3, 5])
        c = rng.choice([16, 18, 32, 48, 64, 96, 128, 192, 256, 384])
        k = rng.choice([16, 48, 96, 136, 200, 320, 384, 448])
        n, h, w = rng.randint(1, 96), rng.randint(3, 28), rng.randint(3, 28)
        stride, dilation = rng.choice([1, 1, 1, 2]), rng.choice([1, 1, 1, 2])
        padding = dilation * (r // 2)
        if (h + 2 * padding - dilation * (r - 1) - 1) < 0 or (w + 2 * padding - dilation * (r - 1) - 1) < 0:
            continue
        meta = rng.choice(METAS)
        precision = rng.choice(["tf32", "tf32", "tf32", "ieee"])
        gen = torch.Generator(device="cuda").manual_seed(i)
        x = torch.randn(n, c, h, w, device="cuda", generator=gen)
        if rng.random() < 0.5:
            x = x.contiguous(memory_format=torch.channels_last)
        wt = torch.randn(k, c, r, r, device="cuda", generator=gen) / (c * r * r) ** 0.5
        b = torch.randn(k, device="cuda", generator=gen) if rng.random() < 0.7 else None
        label = f"case {i:3d}: n={n} c={c} k={k} {r}x{r} {h}x{w} s{stride} d{dilation} {meta.short()}"
        bad, split, same = check(label, x, wt, b, stride, padding, dilation, meta, precision, rng.random() < 0.5,
                                 LAUNCHES)
        two, equal, total = two + split, equal + same, total + 1
        if bad:
            wrong.append(label)
    for name, (n, c, k, h) in {"alexnet_conv4": (256, 384, 384, 13), "alexnet_conv3": (256, 256, 384, 13)}.items():
        gen = torch.Generator(device="cuda").manual_seed(50)
        x = torch.randn(n, c, h, h, device="cuda", generator=gen)
        wt = torch.randn(k, c, 3, 3, device="cuda", generator=gen) / (c * 9) ** 0.5
        b = torch.randn(k, device="cuda", generator=gen)
        meta = Meta(128, 256, 32, 8, 4)
        for x_in, out_cl in ((x, False), (x.contiguous(memory_format=torch.channels_last), True)):
            for how, call in (("eager", None), ("CUDA graph", graphed(x_in, wt, b, 1, meta)),
                              ("side stream", on_a_stream(x_in, wt, b, 1, meta))):
                label = f"{name} {'channels_last' if out_cl else 'nchw'} {how}"
                bad, split, same = check(label, x_in, wt, b, 1, 1, 1, meta, "tf32", out_cl, 12, judge=True, call=call)
                two, equal, total = two + split, equal + same, total + 1
                if bad:
                    wrong.append(label)
    print(f"{len(wrong)} wrong of {total}; {two} in two launches; {equal} bit for bit nhwc_preround's")
    assert not wrong, wrong
    assert two, "no case left channels over"
    print("ok")


if __name__ == "__main__":
    main()
