"""Is the converted ResNet-50 slower than torch's per step? A paired A/B measurement fine enough to answer at
batch 32, where a train step is host-bound and round medians scatter by ±2–4 %.

One model, torchvision's ResNet-50 converted in place (convtune.nn.convert, running what the pins say), timed
in four ways that differ only in its convolutions' classes: torch.nn.Conv2d ("torch"), convtune.nn.Conv2d
on every layer ("convtune": convert(..., leave_torch_layers=False)), convtune.nn.Conv2d except on the layers
that convert(model, example_input) leaves as torch's by default, and torch.nn.Conv2d again ("torch again": what
"no difference" looks like). The same parameters, optimizer, tensors and Python objects in all four, so the
difference is the conversion alone. (Separate
copies are not equal: in a first run the deep copy of torch's model ran 1 % faster than the model itself at
batch 32, interval 0.982–0.996.)

Each step is timed on the host clock up to a synchronize (what a user waits for); the four take turns step by
step, cycling through all 24 orders, so drift cancels out of the per-turn ratios and each one runs as often
right after each other one. Reported per batch and mode: the median
time per step and, for the others, the median of the per-turn ratios to "torch" with a
bootstrap 95 % interval (turns resampled), and the host time each spent over torch's to issue the forward,
the backward and the whole step (median per turn). "Not slower" is read off the interval's upper end.

    python benchmarks/train_step_ab.py [--batch 32 128] [--turns 400] [--mode train eval]     (GPU, torchvision)
"""
from __future__ import annotations

import argparse
import copy
import itertools
import statistics
import sys
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F

import convtune
from convtune.measure.ab import bootstrap_median


def turns(steps: dict[str, Callable[[], None]], n: int, warmup: int,
          spent: list[tuple[float, ...]]) -> dict[str, list[tuple[float, ...]]]:
    """The timings of each step function over `n` turns (each appends its own to `spent`, so that its set-up
    stays outside). The turns cycle through every order of the functions, so each one runs as often before as
    after each other one."""
    names = list(steps)
    orders = list(itertools.permutations(names))
    for _ in range(warmup):
        for k in names:
            steps[k]()
    got: dict[str, list[tuple[float, ...]]] = {k: [] for k in names}
    for i in range(n):
        for k in orders[i % len(orders)]:
            steps[k]()
            got[k].append(spent[-1])
    return got


def measure(batch: int, mode: str, n: int, warmup: int) -> None:
    import torchvision

    torch.manual_seed(0)
    model = torchvision.models.resnet50(weights=None).cuda()
    x = torch.randn(batch, 3, 224, 224, device="cuda")
    left = {s.name for s in convtune.nn.convert(copy.deepcopy(model), example_input=x, leave_torch_layers=True)
            if s.left}
    report = convtune.nn.convert(model, example_input=x, leave_torch_layers=False)  # every layer: the classes take turns
    named = [(name, m) for name, m in model.named_modules() if isinstance(m, convtune.nn.Conv2d)]
    ours = sum(s.runs.startswith("convtune") for s in report)
    train_kernel = sum(s.runs.startswith("convtune") and "; in training torch" not in s.runs for s in report)
    target = torch.randint(0, 1000, (batch,), device="cuda")
    getattr(model, mode)()
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)

    def as_class(cls: type, keep_left: bool = False) -> Callable[[], None]:
        classes = [(m, torch.nn.Conv2d if keep_left and name in left else cls) for name, m in named]

        def step() -> None:
            for m, c in classes:  # object.__setattr__: convtune's __setattr__ would drop the layer's cached decision
                object.__setattr__(m, "__class__", c)
            t0 = time.perf_counter()
            if mode == "eval":
                with torch.no_grad():
                    model(x)
                t_fwd = t_bwd = t_issue = time.perf_counter()
            else:
                opt.zero_grad(set_to_none=True)
                loss = F.cross_entropy(model(x), target)
                t_fwd = time.perf_counter()
                loss.backward()
                t_bwd = time.perf_counter()
                opt.step()
                t_issue = time.perf_counter()
            torch.cuda.synchronize()
            t_end = time.perf_counter()
            spent.append((t_end - t0, t_fwd - t0, t_bwd - t_fwd, t_issue - t0))
        return step

    spent: list[tuple[float, ...]] = []
    got = turns({"torch": as_class(torch.nn.Conv2d), "convtune": as_class(convtune.nn.Conv2d),
                 "convtune, leave_torch_layers": as_class(convtune.nn.Conv2d, keep_left=True),
                 "torch again": as_class(torch.nn.Conv2d)}, n, warmup, spent)
    runs = f"{ours} of {len(report)} layers run convtune's kernel" + (
        f" ({train_kernel} in training calls)" if mode == "train" else "") + f"; leave_torch_layers leaves {len(left)}"
    print(f"\n{mode}, batch {batch}: {n} turns × {len(got)} ({runs})")
    base = got["torch"]
    for k, times in got.items():
        med = statistics.median(t[0] for t in times) * 1e3
        if k == "torch":
            issue = statistics.median(t[3] for t in times) * 1e3
            print(f"  {k:<29} {med:8.3f} ms per step (median), {issue:.3f} ms of it to issue the step on the host")
            continue
        ratios = [a[0] / b[0] for a, b in zip(times, base)]
        lo, hi = bootstrap_median(ratios)
        host = [statistics.median((a[j] - b[j]) * 1e6 for a, b in zip(times, base)) for j in (1, 2, 3)]
        print(f"  {k:<29} {med:8.3f} ms per step · per-turn ratio to torch: median {statistics.median(ratios):.4f}, "
              f"95 % interval {lo:.4f}–{hi:.4f} · host time over torch's, median per turn: forward {host[0]:+.0f} us"
              + (f", backward {host[1]:+.0f} us, whole step {host[2]:+.0f} us" if mode == "train" else ""))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--batch", type=int, nargs="+", default=[32, 128])
    ap.add_argument("--mode", nargs="+", choices=["train", "eval"], default=["train", "eval"])
    ap.add_argument("--turns", type=int, default=400)
    ap.add_argument("--warmup", type=int, default=10)
    a = ap.parse_args()
    if a.turns < 2 or a.warmup < 0:
        print("error: --turns must be at least 2 and --warmup at least 0", file=sys.stderr)
        return 2
    if not torch.cuda.is_available():
        print("error: needs a CUDA GPU", file=sys.stderr)
        return 2
    print(f"{torch.cuda.get_device_name()} · torch {torch.__version__} · TF32 convolutions (torch's default)")
    for batch in a.batch:
        for mode in a.mode:
            measure(batch, mode, a.turns, a.warmup)
    return 0


if __name__ == "__main__":
    sys.exit(main())
