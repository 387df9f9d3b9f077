"""The library as a drop-in, on a GPU: memory layouts on random shapes, the cost of converting a channels_last
input, and torchvision's ResNet-50 (random weights, no download) converted with convtune.nn.convert, in eval
and train mode: outputs and gradients against the original, and time per step against torch.

    python benchmarks/drop_in.py [--shapes 200] [--batch 32] [--steps 20]

The library runs what the pins say (for a model's shapes on a GPU: `python tune_model.py` writes them).

Timing: CUDA events around each step, after warm-up; medians of --steps steps, the two models interleaved
(A B A B ...) so that drift hits both alike. Torch's defaults throughout (TF32 convolutions).
"""

from __future__ import annotations

import argparse
import copy
import random
import statistics
import sys
from typing import Any

import torch
import torch.nn.functional as F

import convtune
from convtune.library.call_key import default_precision, output_format
from convtune.library.functional import decision
from convtune import pins


def layouts_check(n_shapes: int, seed: int) -> int:
    """convtune.conv2d against F.conv2d (both IEEE fp32) for several input/weight layouts: values and the
    output's layout. Returns the number of failures."""
    rng = random.Random(seed)
    cl = torch.channels_last
    fails = total = 0
    torch.backends.cudnn.allow_tf32 = False
    try:
        for _ in range(n_shapes):
            n, c, k = rng.randint(1, 4), rng.randint(1, 24), rng.randint(1, 48)
            kh, kw = rng.randint(1, 5), rng.randint(1, 5)
            h, w = rng.randint(kh, 40), rng.randint(kw, 40)
            st, pd = (rng.randint(1, 3), rng.randint(1, 3)), (rng.randint(0, 2), rng.randint(0, 2))
            x = torch.randn(n, c, h, w, device="cuda")
            wt = torch.randn(k, c, kh, kw, device="cuda")
            b = torch.randn(k, device="cuda")
            variants = {"nchw": (x, wt), "cl input": (x.to(memory_format=cl), wt),
                        "cl weight": (x, wt.to(memory_format=cl)), "cl both": (x.to(memory_format=cl), wt.to(memory_format=cl)),
                        "sliced input": (torch.randn(n, c, h, 2 * w, device="cuda")[..., ::2], wt)}
            for name, (xi, wi) in variants.items():
                total += 1
                ours = convtune.conv2d(xi, wi, b, st, pd, precision="ieee")
                ref = F.conv2d(xi, wi, b, st, pd)
                ok = torch.allclose(ours, ref, atol=1e-4, rtol=1e-4) and all(
                    ours.is_contiguous(memory_format=f) == ref.is_contiguous(memory_format=f)
                    for f in (torch.contiguous_format, cl))
                if not ok:
                    fails += 1
                    print(f"  FAIL {name} n{n} c{c} h{h} w{w} k{k} r{kh}x{kw} s{st} p{pd}: max|diff| "
                          f"{(ours - ref).abs().max().item():.3g}, ours cl={ours.is_contiguous(memory_format=cl)} "
                          f"torch cl={ref.is_contiguous(memory_format=cl)}")
    finally:
        torch.backends.cudnn.allow_tf32 = True
    print(f"layouts: {total} calls ({n_shapes} random shapes × 5 layouts), {fails} wrong (values or output layout)")
    return fails


def time_ms(fns: dict[str, object], steps: int, warmup: int = 3) -> dict[str, float]:
    """Median ms per call of each fn, interleaved, the order rotated every step (A B C, B C A, C A B, ...) so
    that no fn always runs first or after the same neighbour."""
    for _ in range(warmup):
        for f in fns.values():
            f()
    torch.cuda.synchronize()
    got: dict[str, list[float]] = {k: [] for k in fns}
    names = list(fns)
    for i in range(steps):
        for k in names[i % len(names):] + names[:i % len(names)]:
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            fns[k]()
            b.record()
            torch.cuda.synchronize()
            got[k].append(a.elapsed_time(b))
    return {k: statistics.median(v) for k, v in got.items()}


def conversion_cost(steps: int) -> None:
    """KernelBench L1 #50 (fp32, N=256): convtune and cuDNN on an NCHW and a channels_last input."""
    x = torch.randn(256, 3, 224, 224, device="cuda")
    w = torch.randn(96, 3, 11, 11, device="cuda")
    b = torch.randn(96, device="cuda")
    xcl = x.to(memory_format=torch.channels_last)
    t = time_ms({"convtune nchw": lambda: convtune.conv2d(x, w, b, 4, 2),
                 "convtune channels_last (converted)": lambda: convtune.conv2d(xcl, w, b, 4, 2),
                 "copy to nchw alone": lambda: xcl.contiguous(),
                 "torch nchw": lambda: F.conv2d(x, w, b, 4, 2),
                 "torch channels_last": lambda: F.conv2d(xcl, w.to(memory_format=torch.channels_last), b, 4, 2)}, steps)
    print("L1 #50 (N=256, 3→96, 11×11/4), median ms over", steps, "interleaved calls:")
    for k, v in t.items():
        print(f"  {k:<36} {v:8.4f}")
    print(f"  output layout for a channels_last input: "
          f"{'channels_last' if output_format(xcl, w) is torch.channels_last else 'nchw'} (as torch)")


def per_layer(ref: torch.nn.Module, x: torch.Tensor, steps: int) -> None:
    """Each convolution of `ref` on the input it sees in an eval forward: convtune.conv2d (what the pins say:
    convtune's kernel, or torch where a pin says torch) and cuDNN (both TF32, torch's default) against float64,
    and their times: the library's accuracy apart from a deep net's amplification of rounding."""
    seen: dict[str, tuple[torch.nn.Conv2d, torch.Tensor]] = {}
    def keep(name: str) -> Any:
        def hook(m: torch.nn.Module, args: tuple[Any, ...]) -> None:  # None: the input goes on unchanged
            seen.setdefault(name, (m, args[0]))
        return hook
    hooks = [m.register_forward_pre_hook(keep(n)) for n, m in ref.named_modules() if isinstance(m, torch.nn.Conv2d)]
    with torch.no_grad():
        ref(x)
    for h in hooks:
        h.remove()
    rows, shapes = [], {}
    with torch.no_grad():
        for name, (m, xi) in seen.items():
            exact = F.conv2d(xi.double(), m.weight.double(), None, m.stride, m.padding)
            ours = convtune.conv2d(xi, m.weight, None, m.stride, m.padding)
            theirs = F.conv2d(xi, m.weight, None, m.stride, m.padding)
            rel = lambda y: ((y.double() - exact).norm() / exact.norm()).item()  # noqa: E731
            key = (tuple(xi.shape), tuple(m.weight.shape), m.stride, m.padding)
            if key not in shapes:
                shapes[key] = time_ms({"ours": lambda: convtune.conv2d(xi, m.weight, None, m.stride, m.padding),
                                       "cudnn": lambda: F.conv2d(xi, m.weight, None, m.stride, m.padding)}, steps)
            value = decision(xi, m.weight, False, m.stride, m.padding, m.dilation, default_precision()).value
            runs = "torch (pin)" if value == pins.TORCH else f"convtune {pins.describe(value)}"
            rows.append((name, rel(ours), rel(theirs), shapes[key]["ours"], shapes[key]["cudnn"], runs))
    print(f"per layer ({len(rows)} convolutions, {len(shapes)} distinct shapes), TF32, against float64; "
          "'library' is convtune.conv2d, running what the pins say:")
    print(f"  worst rel L2: library {max(r[1] for r in rows):.3g}, cuDNN {max(r[2] for r in rows):.3g}")
    print(f"  the library runs convtune's kernel on {sum(not r[5].startswith('torch') for r in rows)} of {len(rows)} "
          f"layers; faster than cuDNN on {sum(r[3] < r[4] for r in rows)}; sum of layer times: library "
          f"{sum(r[3] for r in rows):.3f} ms, cuDNN {sum(r[4] for r in rows):.3f} ms")
    for name, ours_err, cudnn_err, t_ours, t_cudnn, runs in rows:
        print(f"  {name:<22} rel L2 library {ours_err:.2e} cuDNN {cudnn_err:.2e} · ms library {t_ours:.4f} cuDNN "
              f"{t_cudnn:.4f} ({t_cudnn / t_ours:.2f}x) · {runs}")


def resnet50(batch: int, steps: int) -> None:
    import torchvision

    torch.manual_seed(0)
    ref = torchvision.models.resnet50(weights=None).cuda().eval()
    ours = copy.deepcopy(ref)
    twin = copy.deepcopy(ref)  # torch against itself: the timing noise between two identical models
    x = torch.randn(batch, 3, 224, 224, device="cuda")
    per_layer(ref, x, steps)
    with torch.no_grad():  # how far torch is from itself when only the rounding changes
        a = ref(x)
        torch.backends.cudnn.allow_tf32 = False
        b = ref(x)
        torch.backends.cudnn.allow_tf32 = True
    print(f"eval, torch TF32 vs torch IEEE (the same model): output rel L2 diff {((a - b).norm() / b.norm()).item():.3g}, "
          f"argmax agree {(a.argmax(1) == b.argmax(1)).float().mean().item():.3f}")
    report = convtune.nn.convert(ours, example_input=x)
    print(report)
    # the converted model with its one convtune layer (the stem) handed back to torch: what the module costs
    # on the 52 layers pinned to torch, apart from the stem's own speed
    mixed = copy.deepcopy(ours)
    mixed.conv1.__class__ = torch.nn.Conv2d
    # the stem alone, forward and the weight's gradient (its input needs none, as in the model)
    stems = {"torch": copy.deepcopy(ref.conv1), "convtune": copy.deepcopy(ours.conv1)}
    grad = torch.randn(batch, 64, 112, 112, device="cuda")
    t = time_ms({k: (lambda m: lambda: m(x).backward(grad))(m) for k, m in stems.items()}, steps)
    print(f"stem conv1 forward + weight gradient, median ms: torch {t['torch']:.4f}, convtune {t['convtune']:.4f}")
    for mode in ("eval", "train"):
        for m in (ref, ours, twin, mixed):
            getattr(m, mode)()
        if mode == "eval":
            with torch.no_grad():
                a, b = ref(x), ours(x)
            rel = ((a - b).norm() / a.norm()).item()
            print(f"eval: output rel L2 diff {rel:.3g}, max|diff| {(a - b).abs().max().item():.3g}, "
                  f"argmax agree {(a.argmax(1) == b.argmax(1)).float().mean().item():.3f}")
            with torch.no_grad():
                t = time_ms({"torch": lambda: ref(x), "torch twin": lambda: twin(x), "convtune": lambda: ours(x),
                             "convtune, stem to torch": lambda: mixed(x)}, steps)
        else:
            target = torch.randint(0, 1000, (batch,), device="cuda")
            for m in (ref, ours):
                m.zero_grad(set_to_none=True)
                F.cross_entropy(m(x), target).backward()
            worst = max((((p.grad - q.grad).norm() / p.grad.norm()).item(), n)
                        for (n, p), (_, q) in zip(ref.named_parameters(), ours.named_parameters()) if p.grad is not None)
            grads = {n: p.grad.clone() for n, p in ref.named_parameters()}
            ref.zero_grad(set_to_none=True)
            torch.backends.cudnn.allow_tf32 = False
            F.cross_entropy(ref(x), target).backward()
            torch.backends.cudnn.allow_tf32 = True
            base = max((((grads[n] - p.grad).norm() / p.grad.norm()).item(), n) for n, p in ref.named_parameters())
            print(f"train: worst parameter gradient rel L2 diff, convtune vs torch {worst[0]:.3g} ({worst[1]}); "
                  f"torch TF32 vs torch IEEE {base[0]:.3g} ({base[1]})")
            opts = {name: torch.optim.SGD(m.parameters(), lr=1e-3)
                    for name, m in (("torch", ref), ("torch twin", twin), ("convtune", ours),
                                    ("convtune, stem to torch", mixed))}

            def step(m: torch.nn.Module, opt: torch.optim.Optimizer) -> None:
                opt.zero_grad(set_to_none=True)
                F.cross_entropy(m(x), target).backward()
                opt.step()
            models = {"torch": ref, "torch twin": twin, "convtune": ours, "convtune, stem to torch": mixed}
            t = time_ms({k: (lambda m, o: lambda: step(m, o))(m, opts[k]) for k, m in models.items()}, steps)
        print(f"{mode}: median ms per step (batch {batch}, {steps} steps, order rotated): "
              + ", ".join(f"{k} {v:.3f} ({v / t['torch']:.3f}x)" for k, v in t.items())
              + " · 'torch twin' is an identical copy of torch's model: its ratio is the noise")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shapes", type=int, default=200)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    if not torch.cuda.is_available():
        print("error: needs a CUDA GPU", file=sys.stderr)
        return 2
    print(f"{torch.cuda.get_device_name()} · torch {torch.__version__}")
    fails = layouts_check(a.shapes, a.seed)
    conversion_cost(a.steps)
    resnet50(a.batch, a.steps)
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
