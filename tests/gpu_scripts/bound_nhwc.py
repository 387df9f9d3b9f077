"""GPU check of the bound launches (kernels.runner.bound_runner) in nhwc_igemm.run and kernels/layout.py: on random
shapes, input and output layouts, precisions and both nhwc kernels (through their `prepared` call, as the library
and the contest launch them), the first call goes through Triton's dispatch and binds, the next two go past it, and
all three give the same bits, within the precision's tolerance of float64. Prints the count and 'ok'; any
failure raises."""

import random

import torch
import torch.nn.functional as F

from convtune.kernels import get_variant, layout
from convtune.kernels.variants import nhwc_igemm

random.seed(21)
TOL = {"tf32": 5e-3, "ieee": 1e-5}
CASES = 48
bad, bound_conv, bound_copy = [], 0, 0
for i in range(CASES):
    n, c, k = random.randint(1, 4), random.choice([16, 20, 32, 48, 64, 96]), random.randint(1, 200)
    kh = random.choice([1, 3, 5])
    h, w = random.randint(kh, 30), random.randint(kh, 30)
    x = torch.randn(n, c, h, w, device="cuda")
    if i % 2:
        x = x.contiguous(memory_format=torch.channels_last)
    wt = torch.randn(k, c, kh, kh, device="cuda") / (c * kh * kh) ** 0.5
    b = torch.randn(k, device="cuda") if i % 3 else None
    name = ("nhwc_igemm", "nhwc_preround")[(i // 2) % 2]
    precision = random.choice(["tf32", "ieee"])
    v = get_variant(name)
    fmt = random.choice([torch.contiguous_format, torch.channels_last])
    out = torch.empty(n, k, h, w, device="cuda", memory_format=fmt)
    nhwc_igemm._binaries.clear()
    layout._bound.clear()  # the first call below goes through Triton's dispatch
    call = v.prepared(x, wt, b, 1, kh // 2, 1, v.default_meta(k, 1, w, precision), precision, out=out)
    outs = [call().clone() for _ in range(3)]
    bound_conv += len(nhwc_igemm._binaries)
    bound_copy += len(layout._bound)
    ref = F.conv2d(x.double(), wt.double(), None if b is None else b.double(), 1, kh // 2)
    rel = float((outs[0].double() - ref).norm() / ref.norm().clamp_min(1e-30))
    label = f"case {i}: {name} {precision} n={n} c={c} k={k} r={kh} h={h} w={w} in {'cl' if i % 2 else 'nchw'} out {fmt}"
    if not (torch.equal(outs[0], outs[1]) and torch.equal(outs[0], outs[2])):
        bad.append(f"{label}: the bound launches differ from the first")
    if rel > TOL[precision]:
        bad.append(f"{label}: relative error {rel:.3g}")
    if not nhwc_igemm._binaries:
        bad.append(f"{label}: the conv was not bound")
for b_ in bad:
    print("FAIL", b_)
wrong = len({b_.split(":")[0] for b_ in bad})  # cases, not checks: a case may fail more than one
print(f"{CASES - wrong} of {CASES} cases: bound launches give the first call's bits; {bound_conv} conv and "
      f"{bound_copy} copy binaries bound")
assert not bad
print("ok")
