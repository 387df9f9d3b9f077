"""GPU check of the nhwc kernels on short K loops (meta.safe_stages): Triton 3.6 on the H200 gave wrong, launch-to-launch
different sums where nhwc_igemm's K loop, with A rounded in the kernel and 256-wide N tiles, ran 2 to num_stages - 1
times. Here 1x1 and 3x3 convolutions over 16 to 128 channels (1 to 36 K
steps) at tiles of 2 to 5 stages, both nhwc kernels in tf32, 6 launches each: every launch within 5e-3 of float64 and
all of a case's launches the same bits. Prints each case and the counts; any wrong case raises."""

import itertools

import torch
import torch.nn.functional as F

from convtune.kernels import Meta
from convtune.kernels.variants import nhwc_igemm
from convtune.kernels.meta import safe_stages

METAS = [Meta(128, 256, 32, 8, 3), Meta(128, 256, 32, 8, 4), Meta(64, 256, 32, 4, 3), Meta(64, 256, 32, 4, 4),
         Meta(64, 256, 32, 4, 5), Meta(128, 128, 32, 8, 3), Meta(64, 128, 32, 4, 3)]
LAUNCHES = 6
wrong, cases, clamped = [], 0, 0
for c, r, meta, pre in itertools.product([16, 32, 48, 64, 80, 96, 128], [1, 3], METAS, [False, True]):
    n, h, w, k = 128, 12, 12, 256
    g = torch.Generator(device="cuda").manual_seed(c * 10 + r)
    x = torch.randn(n, c, h, w, device="cuda", generator=g).contiguous(memory_format=torch.channels_last)
    wt = torch.randn(k, c, r, r, device="cuda", generator=g) / (c * r * r) ** 0.5
    ref = F.conv2d(x.double(), wt.double(), None, 1, r // 2)
    launch = nhwc_igemm.launch_preround if pre else nhwc_igemm.launch
    outs = []
    for _ in range(LAUNCHES):
        out = torch.full((n, k, h, w), float("nan"), device="cuda").contiguous(memory_format=torch.channels_last)
        outs.append(launch(x, wt, None, 1, r // 2, 1, meta, "tf32", out=out).out)
    torch.cuda.synchronize()
    rels = [float((y.double() - ref).norm() / ref.norm()) for y in outs]
    same = all(torch.equal(outs[0], y) for y in outs[1:])
    steps = r * r * -(-c // meta.BLOCK_K)
    stages = safe_stages(meta.num_stages, steps)
    cases += 1
    clamped += stages != meta.num_stages
    label = (f"c={c:3d} r={r} {steps:2d} K steps {meta.short():22s} compiled at s{stages} "
             f"{'nhwc_preround' if pre else 'nhwc_igemm   '}")
    bad = max(rels) > 5e-3 or not same
    if bad:
        wrong.append(label)
    print(f"{'WRONG' if bad else 'ok   '} {label} max rel {max(rels):.1e}, launches {'the same' if same else 'differ'}",
          flush=True)

print(f"{cases - len(wrong)} of {cases} cases right ({clamped} compiled at a depth of their loop's length)")
assert not wrong, wrong
assert clamped, "no case ran a loop shorter than num_stages"
print("ok")
