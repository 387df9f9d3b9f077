"""GPU check of the one-launch weight pack and of convtune.nn.Conv2d's bound launch (functional.Bound), run by tests/test_gpu.py in a subprocess
without the interpreter. Prints 'ok' at the end; any failure raises."""

import random

import torch
import torch.nn.functional as F

import os

os.environ.setdefault("CONVTUNE_UNPINNED", "kernel")  # the kernels' paths through the library are the subject
import convtune
from convtune.kernels.variants import implicit_gemm as ig

torch.backends.cudnn.allow_tf32 = False  # ieee: our kernel and cuDNN agree to 1e-4
random.seed(1)

# 0. The one-launch weight pack (compiled, bound runner) gives bitwise what pack_weight's torch operations give.
from convtune.kernels import weight_pack  # noqa: E402

for i in range(40):
    kw, pad_w, vec = random.randint(1, 11), random.randint(0, 5), random.choice((1, 2, 4))
    wt = torch.randn(random.randint(1, 130), random.randint(1, 9), random.randint(1, 11), kw, device="cuda")
    for rnd in (True, False):
        ref_pack = ig.pack_weight(wt, pad_w, vec, rnd)[0].contiguous()
        kwp, j0 = ig.row_window(kw, pad_w, vec)
        got = weight_pack.pack(wt, kwp, weight_pack.window_start(kw, kwp, pad_w, j0), rnd)
        assert torch.equal(got.view(torch.int32), ref_pack.view(torch.int32)), (i, kw, pad_w, vec, rnd)

# 1. On random shapes, the bound launch gives bitwise what the full launch path gives (the same binary).
for i in range(24):
    n, c, k = random.randint(1, 4), random.randint(1, 9), random.randint(1, 150)
    kh, kw = random.randint(1, 11), random.randint(1, 11)
    s, p = (random.randint(1, 4), random.randint(1, 4)), (random.randint(0, 3), random.randint(0, 3))
    h, w = random.randint(kh, 60), random.randint(kw, 60)
    layer = convtune.nn.Conv2d(c, k, (kh, kw), s, p, bias=bool(i % 2)).cuda()
    x = torch.rand(n, c, h, w, device="cuda")
    with torch.no_grad():
        first = layer(x)
        assert layer._bound is not None, i
        bound = layer(x)
    choice, _ = (lambda d: (d.value, d.source))(convtune.library.functional.decision(x, layer.weight, layer.bias is not None, s, p, 1, "ieee"))
    assert choice.kernel == "implicit_gemm", (i, choice)  # a bound launch is made for implicit_gemm plans only
    full = ig.launch(x, layer.weight.detach(), None if layer.bias is None else layer.bias.detach(), s, p, 1,
                     choice.meta, "ieee").out
    assert torch.equal(bound, full) and torch.equal(first, full), (i, (bound - full).abs().max().item())

# 1b. implicit_gemm.run launches a binary past Triton's dispatch from its second call on (host.BoundLaunches), with an
# epilogue too (the library's fused calls): those calls give the first one's bits, in both output layouts.
from convtune.kernels import Meta  # noqa: E402
from convtune.kernels.epilogue import Epilogue  # noqa: E402

for i in range(16):
    n, c, k, kh = random.randint(1, 4), random.randint(1, 40), random.randint(1, 150), random.choice((1, 3))
    s, h, w = random.choice((1, 2)), random.randint(3, 40), random.randint(3, 40)
    x, wt, b = (torch.randn(n, c, h, w, device="cuda"), torch.randn(k, c, kh, kh, device="cuda"),
                torch.randn(k, device="cuda"))
    ref_out = F.conv2d(x, wt, b, s, kh // 2)
    fmt = torch.channels_last if i % 2 else torch.contiguous_format
    r = torch.randn_like(ref_out).contiguous(memory_format=fmt) if i % 4 < 2 else None
    ep = Epilogue(("add", "relu"), residual=r) if r is not None else Epilogue(("relu",))
    ref_out = F.relu(ref_out + r if r is not None else ref_out)
    before, outs = len(ig._binaries), []
    for _ in range(3):
        outs.append(torch.full_like(ref_out, float("nan")).contiguous(memory_format=fmt))
        ig.launch(x, wt, b, s, kh // 2, 1, Meta(64, 64, 32, 4, 3), "ieee", out=outs[-1], epilogue=ep)
    assert len(ig._binaries) == before + 1, i  # bound after the first launch
    assert torch.equal(outs[1], outs[0]) and torch.equal(outs[2], outs[0]), i
    torch.testing.assert_close(outs[2], ref_out, rtol=1e-4, atol=1e-4)

# 2. What changes a call: an in-place weight update, a new attribute, an unaligned input, gradients.
layer = convtune.nn.Conv2d(3, 16, 5, stride=2, padding=2).cuda()
x = torch.randn(4, 3, 33, 32, device="cuda")


def ref(t, **kw):
    return F.conv2d(t, layer.weight, layer.bias, kw.get("stride", layer.stride), kw.get("padding", layer.padding))


with torch.no_grad():
    torch.testing.assert_close(layer(x), ref(x), rtol=1e-4, atol=1e-4)
    bound = layer._bound
    layer.weight.mul_(-2)  # a new version: repacked
    torch.testing.assert_close(layer(x), ref(x), rtol=1e-4, atol=1e-4)
    assert layer._bound is bound
    layer.weight.data = layer.weight.data.clone() + 1  # new storage, same tensor: bound again
    torch.testing.assert_close(layer(x), ref(x), rtol=1e-4, atol=1e-4)
    assert layer._bound is not bound
    layer.padding = (1, 0)  # an attribute: the bound call is dropped
    assert layer._bound is None
    torch.testing.assert_close(layer(x), ref(x), rtol=1e-4, atol=1e-4)
    odd = torch.randn(4 * 3 * 33 * 32 + 1, device="cuda")[1:].view(4, 3, 33, 32)  # 4-byte aligned only
    torch.testing.assert_close(layer(odd), ref(odd), rtol=1e-4, atol=1e-4)
    assert layer._bound.align == odd.data_ptr() & 15
xg = x.clone().requires_grad_()
y = layer(xg)
assert type(y.grad_fn).__name__ == "_EagerConvBackward", type(y.grad_fn)
g = torch.randn_like(y)
gx, gw, gb = torch.autograd.grad(y, (xg, layer.weight, layer.bias), g)
xr = x.clone().requires_grad_()
rx, rw, rb = torch.autograd.grad(ref(xr), (xr, layer.weight, layer.bias), g)
for a, b in ((gx, rx), (gw, rw), (gb, rb)):
    torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-3)

# 3. Weights that are not plain parameters: the module reads its parameters straight from _parameters (cheaper
# than Module.__getattr__); a parametrization (a subclass with a `weight` property) or the old weight_norm
# (weight removed from _parameters, recomputed by a pre-hook) must still give the computed weight.
import warnings  # noqa: E402

from torch.nn.utils import parametrizations  # noqa: E402

for make in (lambda m: parametrizations.weight_norm(m), lambda m: torch.nn.utils.weight_norm(m)):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # the old weight_norm is deprecated
        torch.manual_seed(0)
        theirs = make(torch.nn.Conv2d(3, 16, 5, stride=2, padding=2).cuda())
        torch.manual_seed(0)
        layer = make(convtune.nn.Conv2d(3, 16, 5, stride=2, padding=2).cuda())
    for step in range(2):
        with torch.no_grad():
            torch.testing.assert_close(layer(x), theirs(x), rtol=1e-4, atol=1e-4)
        ours_loss, their_loss = layer(x).square().sum(), theirs(x).square().sum()
        ours_grads = torch.autograd.grad(ours_loss, [p for p in layer.parameters()])
        their_grads = torch.autograd.grad(their_loss, [p for p in theirs.parameters()])
        for a, b in zip(ours_grads, their_grads):
            torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-3)
        with torch.no_grad():  # a step on the underlying parameters: the next call sees the new weight
            for p, g in zip(layer.parameters(), ours_grads):
                p.sub_(1e-3 * g)
            for p, g in zip(theirs.parameters(), their_grads):
                p.sub_(1e-3 * g)
# 4. A bound launch goes to the binary's C launcher (kernels.runner._direct) on this Triton, with and without TMA
# descriptors (nchw_igemm's TMA weight; the channels_last copy): it gives the dispatched launch's bits, encodes a
# descriptor once per pointer, and with a launch hook set goes through Triton's runner, so that the hook sees it.
from triton import knobs  # noqa: E402
from triton.backends.nvidia import driver as nvidia  # noqa: E402

from convtune.kernels import get_variant, layout  # noqa: E402
from convtune.kernels.variants import nchw_igemm  # noqa: E402

encoded = []
encode = nvidia.make_tensordesc_arg
nvidia.make_tensordesc_arg = lambda d, meta: encoded.append(d) or encode(d, meta)
x, wt = torch.randn(2, 64, 20, 20, device="cuda"), torch.randn(64, 64, 3, 3, device="cuda")
outs = [torch.full((2, 64, 20, 20), float("nan"), device="cuda") for _ in range(5)]
nchw = get_variant("nchw_igemm").launch
nchw(x, wt, None, 1, 1, 1, Meta(64, 64, 32, 4, 3), "tf32", out=outs[0])
(binary,) = [b for b in nchw_igemm._binaries._cache.values()]
assert binary.launch.__qualname__.startswith("_direct."), binary.launch.__qualname__
encoded.clear()
for out in outs[1:4]:
    nchw(x, wt, None, 1, 1, 1, Meta(64, 64, 32, 4, 3), "tf32", out=out)
assert len(encoded) == 1, len(encoded)  # the weight's descriptor, once
seen, hook = [], knobs.runtime.launch_enter_hook
knobs.runtime.launch_enter_hook = seen.append
try:
    nchw(x, wt, None, 1, 1, 1, Meta(64, 64, 32, 4, 3), "tf32", out=outs[4])
finally:
    knobs.runtime.launch_enter_hook = hook
if hasattr(hook, "add"):  # Triton's chain of hooks (a profiler adds to it)
    hook.add(seen.append)
    try:
        nchw(x, wt, None, 1, 1, 1, Meta(64, 64, 32, 4, 3), "tf32", out=outs[4])
    finally:
        hook.remove(seen.append)
nvidia.make_tensordesc_arg = encode
assert len(seen) == (2 if hasattr(hook, "add") else 1), seen
assert all(torch.equal(o, outs[0]) for o in outs[1:]), [(o - outs[0]).abs().max().item() for o in outs]
y = torch.randn(3, 40, 9, 11, device="cuda")
copies = [layout.to_channels_last(y) for _ in range(3)]
assert all(b.__qualname__.startswith("_direct.") for b in layout._bound.values()), list(layout._bound.values())
assert all(torch.equal(c, y.contiguous(memory_format=torch.channels_last)) for c in copies)
print("ok")
