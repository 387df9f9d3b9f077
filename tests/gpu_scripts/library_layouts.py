"""GPU check of the library's layouts: convtune.conv2d and convtune.nn.Conv2d on random shapes with
NCHW and channels_last inputs (and channels_last weights), without gradients and with them, against float64 and
torch: the values within the precision's tolerance, the output laid out as torch lays it out, the gradients
torch's, and each call on the kernel its pin names: every second call's key is pinned (in a pins file of this
script's own) to a kernel the rule (kernels.library_variant) would not pick, so that an NCHW call runs nhwc_igemm
or nhwc_preround on a channels_last copy and a channels_last call implicit_gemm on an NCHW copy or nhwc_preround
on a rounded one. Prints a count per
kernel and layout and 'ok' at the end; any failure raises."""

import collections
import os
import random
import tempfile
from pathlib import Path

import torch
import torch.nn.functional as F

PINS = Path(tempfile.mkdtemp()) / "pins.yaml"
os.environ["CONVTUNE_PINS"] = str(PINS)  # before convtune reads any pin: random shapes, no pins but these

os.environ.setdefault("CONVTUNE_UNPINNED", "kernel")  # the kernels' paths through the library are the subject
import convtune  # noqa: E402
from convtune.library import call_key, dispatch, functional  # noqa: E402
from convtune import pins  # noqa: E402
from convtune.kernels import LIBRARY_KERNELS, get_variant, library_variant  # noqa: E402
from convtune.problem import ConvProblem  # noqa: E402

pins.create_empty(PINS)  # a pins file of the script's own, empty until it pins a shape

random.seed(13)
TOL = {"tf32": 5e-3, "ieee": 1e-5}  # relative L2 against float64 (selfcheck's tf32 bound; ieee as fp32)
seen: collections.Counter = collections.Counter()
worst_vs_torch = {"tf32": 0.0, "ieee": 0.0}
failures = []


def check(i: int) -> None:
    c = random.choice([3, 4, 8, 12, 16, 18, 24, 32, 64, 96, 128])
    n, k = random.randint(1, 6), random.randint(1, 300)
    kh, kw = random.choice([1, 2, 3, 3, 5, 7]), random.choice([1, 2, 3, 3, 5, 7])
    s, d = (random.randint(1, 3), random.randint(1, 3)), (random.choice([1, 1, 2]), random.choice([1, 1, 2]))
    p = (random.randint(0, 3), random.randint(0, 3))
    h, w = random.randint(d[0] * (kh - 1) + 1, 48), random.randint(d[1] * (kw - 1) + 1, 48)
    layout = random.choice(["channels_last input", "channels_last input", "nchw", "channels_last weight"])
    precision = random.choice(["tf32", "ieee"])
    torch.backends.cudnn.allow_tf32 = precision == "tf32"
    x = torch.randn(n, c, h, w, device="cuda")
    wt = torch.randn(k, c, kh, kw, device="cuda") / (c * kh * kw) ** 0.5
    b = torch.randn(k, device="cuda") if i % 3 else None
    if layout == "channels_last input":
        x = x.contiguous(memory_format=torch.channels_last)
    elif layout == "channels_last weight":
        wt = wt.contiguous(memory_format=torch.channels_last)
    grad = i % 4 == 0
    call = call_key.call_layout(x, wt)
    rule = library_variant(call, c)
    # promote pins a kernel only to calls it ran correctly, and fold_igemm refuses dilation (tests/test_fold_igemm.py:
    # such a pin is an error that names it); the kernels restricted to a family of shapes (fused_gluon, nchw_1x1,
    # nchw_igemm: RESTRICTED_TO) would refuse most of these random calls, and have GPU scripts of their own
    others = [kernel for kernel in LIBRARY_KERNELS if kernel != rule and (kernel != "fold_igemm" or d == (1, 1))
              and get_variant(kernel).restricted_to is None]
    other = others[(i // 2) % len(others)]
    routed = i % 2 == 1
    dispatch.forget()  # so that the plans cached after the call are this call's
    if routed:  # pin this key to the other kernel, at its default configuration
        problem = ConvProblem("", n, c, h, w, k, kh, kw, s, p, d, 1, b is not None, layout=call)
        meta = get_variant(other).default_meta(k, s[1], w, precision)
        pins.write_pin(PINS, torch.cuda.get_device_name(), rule, pins.pin_key(problem.key(), precision),
                       pins.KernelPin(other, meta), {"note": "library_layouts.py: routed"})
    xg, wg = x.clone().requires_grad_(grad), wt.clone().requires_grad_(grad)
    ours = convtune.conv2d(xg, wg, b, s, p, d)
    theirs_x, theirs_w = x.clone().requires_grad_(grad), wt.clone().requires_grad_(grad)
    theirs = F.conv2d(theirs_x, theirs_w, b, s, p, d)
    ref = F.conv2d(x.double(), wt.double(), None if b is None else b.double(), s, p, d)
    rel = float((ours.detach().double() - ref).norm() / ref.norm().clamp_min(1e-30))
    label = f"case {i}: n={n} c={c} k={k} r={kh}x{kw} s={s} p={p} d={d} h={h} w={w} {layout} {precision} grad={grad}"
    assert rel <= TOL[precision], f"{label}: relative L2 error {rel:.3g}"
    for fmt in (torch.contiguous_format, torch.channels_last):
        assert ours.is_contiguous(memory_format=fmt) == theirs.is_contiguous(memory_format=fmt), f"{label}: layout {fmt}"
    worst_vs_torch[precision] = max(worst_vs_torch[precision], float((ours - theirs).detach().abs().max()))
    value, source = (lambda d: (d.value, d.source))(functional.decision(x, wt, b is not None, s, p, d, precision, grad))
    assert value != pins.TORCH, f"{label}: pinned to torch ({source})"
    assert value.kernel == (other if routed else rule) and routed == source.startswith("pin "), \
        f"{label}: runs {value.kernel} ({source}), the rule says {rule}"
    planned = [type(v).__module__.rsplit(".", 1)[-1] for v in functional.cached_plans()]
    module = "nhwc_igemm" if value.kernel == "nhwc_preround" else value.kernel  # one launcher module for both
    assert planned == [module], f"{label}: planned {planned} for {value.kernel}"
    if module == "nhwc_igemm":  # who rounds the input for tf32: the copy (nhwc_preround) or the kernel
        [plan] = functional.cached_plans()
        assert plan.input_rounded == (value.kernel == "nhwc_preround" and precision == "tf32"), label
    seen[(value.kernel, call, "pinned there" if routed else "by the rule")] += 1
    if grad:
        ours.square().sum().backward()
        theirs.square().sum().backward()
        for a, r, name in ((xg, theirs_x, "input"), (wg, theirs_w, "weight")):
            err = float((a.grad - r.grad).norm() / r.grad.norm().clamp_min(1e-30))
            assert err <= 5e-3, f"{label}: {name} gradient {err:.3g} from torch's"
            assert a.grad.stride() == r.grad.stride() or name == "weight", f"{label}: {name} gradient strides"


CASES = 64  # each random shape compiles its own binaries (about a second each on the H200's host)
for i in range(CASES):
    if i % 16 == 0:
        print(f"  {i}/{CASES} cases", flush=True)
    try:
        check(i)
    except AssertionError as e:  # every case runs: a GPU call is too dear to stop at the first failure
        failures.append(str(e))

# convtune.nn.Conv2d on a channels_last input: the module's own path (no bound launch for that layout)
torch.backends.cudnn.allow_tf32 = False
layer = convtune.nn.Conv2d(32, 64, 3, padding=1).cuda()
ref_layer = torch.nn.Conv2d(32, 64, 3, padding=1).cuda()
ref_layer.load_state_dict(layer.state_dict())
x = torch.randn(4, 32, 20, 20, device="cuda").contiguous(memory_format=torch.channels_last)
with torch.no_grad():
    for _ in range(3):
        y = layer(x)
assert layer._bound is None and y.is_contiguous(memory_format=torch.channels_last)
torch.testing.assert_close(y, ref_layer(x), rtol=1e-4, atol=1e-4)

for f in failures:
    print("FAIL", f)
for key, count in sorted(seen.items()):
    print(f"{count:4d} calls  {key[0]:<14} {key[1]:<14} {key[2]}")
print("largest |ours - torch| by precision:", {k: f"{v:.2g}" for k, v in worst_vs_torch.items()})
assert not failures, f"{len(failures)} failure(s) in {CASES} cases"
print("ok")
