"""GPU check of nchw_1x1 (the input's TMA tiles, the register-A MMA, the masked-load path where H·W is not a multiple
of 4, both output layouts, the bound launches): on random 1×1 stride-1 problems (1-512 input and output channels,
sizes 1-80, batch 1-16, bias or not, any dilation), inputs NCHW, channels_last or a view at an odd offset, at every
configuration it takes and the default, through the variant's `prepared` call (as the library and the contest launch
it): the first call goes through Triton's dispatch and binds, the next two go past it, and all three give the same
bits; the output is within 1e-5 (relative to the output's scale) of cuDNN's rule at stride 1 (operands rounded to
nearest TF32 with ties to even, exact sums). resnet50_layer1_1x1 itself (batch 64, 256 → 64 channels, 56 × 56) must
pass KernelBench's allclose against torch's own output. Counts how many random cases torch's output matches by that
allclose (informative: cuDNN may run another algorithm, or none in TF32, for a shape). Prints the counts and 'ok';
any failure raises."""

import random

import torch
import torch.nn.functional as F

from convtune.kernels import Meta, get_variant
from convtune.kernels.variants import nchw_1x1
from convtune.kernels.precision import round_to_tf32_even

random.seed(19)
torch.backends.cudnn.allow_tf32 = True  # the judge's reference: torch's defaults
CASES = 100
v = get_variant("nchw_1x1")
bad, judged_ok, skipped = [], 0, 0


def check(label, x, wt, b, meta, fmt, dil=1, judge=False):
    global judged_ok, skipped
    ref_shape = (x.shape[0], wt.shape[0], x.shape[2], x.shape[3])
    out = torch.empty(ref_shape, device="cuda", memory_format=fmt)
    nchw_1x1._binaries.clear()  # the first call below goes through Triton's dispatch
    try:
        call = v.prepared(x, wt, b, 1, 0, dil, meta, "tf32", out=out)
        outs = [call().clone() for _ in range(3)]
    except Exception as e:  # a configuration the GPU cannot hold
        if "OutOfResources" in type(e).__name__:
            skipped += 1
            return
        raise
    if not (torch.equal(outs[0], outs[1]) and torch.equal(outs[0], outs[2])):
        bad.append(f"{label}: the bound launches differ from the first")
    if len(nchw_1x1._binaries) != 1:
        bad.append(f"{label}: the launch was not bound ({len(nchw_1x1._binaries)})")
    rule = F.conv2d(round_to_tf32_even(x).double(), round_to_tf32_even(wt).double(),
                    None if b is None else b.double())
    scale = max(1.0, float(rule.abs().max()))
    off = float((outs[0].double() - rule).abs().max()) / scale if torch.isfinite(outs[0]).all() else float("inf")
    if off > 1e-5:
        bad.append(f"{label}: {off:.3g} from cuDNN's TF32 rule (relative to {scale:.3g})")
    close = bool(torch.allclose(outs[0], F.conv2d(x, wt, b, 1, 0, dil), atol=1e-4, rtol=1e-4))
    judged_ok += close
    if judge and not close:
        bad.append(f"{label}: not allclose(1e-4) to torch's own output")


def log_int(lo, hi):
    return round(2 ** random.uniform(lo.bit_length() - 1, hi.bit_length() - 1))


for i in range(CASES):
    n, c, k = random.choice([1, 2, 3, 4, 8, 16]), log_int(1, 512), log_int(1, 512)
    h, w = random.randint(1, 80), random.randint(1, 80)
    if i % 4 == 0:  # H·W a multiple of 4 (the TMA path) half the time at least
        w = max(4, w - w % 4)
    x = torch.randn(n, c, h, w, device="cuda") if i % 2 else torch.rand(n, c, h, w, device="cuda")
    layout = ("nchw", "channels_last", "offset")[i % 3]
    if layout == "channels_last":
        x = x.contiguous(memory_format=torch.channels_last)
    elif layout == "offset":
        storage = torch.empty(x.numel() + 1, device="cuda")
        storage[1:].copy_(x.flatten())
        x = storage[1:].view(n, c, h, w)
    wt = (torch.rand(k, c, 1, 1, device="cuda") * 2 - 1) / c ** 0.5
    b = torch.rand(k, device="cuda") * 0.1 if i % 5 else None
    if i % 4 == 1:
        meta = v.default_meta(k, 1, w, "tf32")
    else:
        meta = Meta(random.choice([64, 128, 256]), random.choice([16, 32, 64]), random.choice([16, 32, 64]),
                    random.choice([4, 8]), random.choice([1, 2, 3, 4]))
    fmt = random.choice([torch.contiguous_format, torch.channels_last])
    check(f"case {i}: n={n} c={c} k={k} h={h} w={w} in {layout} out {fmt} {meta.short()} bias={b is not None}",
          x, wt, b, meta, fmt, dil=random.choice([1, 1, 2]))
conv = torch.nn.Conv2d(256, 64, 1, bias=False).cuda()
x = torch.randn(64, 256, 56, 56, device="cuda")
for meta in (v.default_meta(64, 1, 56, "tf32"), Meta(128, 64, 64, 8, 3)):
    check(f"resnet50_layer1_1x1 {meta.short()}", x, conv.weight.detach(), None, meta, torch.contiguous_format,
          judge=True)
for b_ in bad:
    print("FAIL", b_)
total = CASES + 2
wrong = len({b_.split(":")[0] for b_ in bad})  # cases, not checks: a case may fail more than one
print(f"{total - wrong - skipped} of {total - skipped} cases right ({skipped} configurations the GPU cannot hold), "
      f"the bound launches giving the first call's bits; {judged_ok} allclose(1e-4) to torch's own output "
      "(resnet50_layer1_1x1 required)")
assert not bad
print("ok")
