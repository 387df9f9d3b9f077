"""Where a converted ResNet-50's train step (batch 32) loses time against torch's, measured finely enough to
tell a 1 % gap from noise: six models, each step timed with CUDA events split into zero_grad+forward, backward
and optimizer step, plus the host time to issue the step; the models interleaved with the order rotated,
in several rounds, so that drift shows as round-to-round spread. Then a CPU-side profile of both models
(torch.profiler, CPU activity): self CPU time per operator per step, the largest differences.

Models: torch; an identical torch twin (the noise); convtune (every layer converted: the stem runs convtune's
kernel, the rest are pinned to torch); 'stem to torch' (converted, its stem back to torch.nn.Conv2d: what the
module costs on the 52 torch-pinned layers); and torch / convtune with the stem's weight left out of the
optimizer ('stem frozen': no repack of the stem's packed weight after each step). With --extra, three more:
torch and convtune with the stem's weight not requiring gradients ('stem no grad': no autograd node for the
stem at all, only its forward kernel differs), and convtune with the stem's weight repacked right after the
optimizer step instead of at the next forward ('repack after step').

    python benchmarks/probe_train_gap.py [--rounds 5] [--steps 60]     (GPU, torchvision)
"""
import argparse
import collections
import copy
import statistics
import time

import torch
import torch.nn.functional as F
import torchvision
from torch.profiler import ProfilerActivity, profile

import convtune
from convtune.kernels import implicit_gemm as ig


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--extra", action="store_true", help="also the 'stem no grad' and 'repack after step' models")
    ap.add_argument("--only", default="", help="comma-separated model names to keep (default: all)")
    a = ap.parse_args()
    torch.manual_seed(0)
    ref = torchvision.models.resnet50().cuda().train()
    ours = copy.deepcopy(ref)
    print(convtune.nn.convert(ours, example_input=torch.randn(a.batch, 3, 224, 224, device="cuda")).__str__()
          .splitlines()[-1])
    mixed = copy.deepcopy(ours)
    mixed.conv1.__class__ = torch.nn.Conv2d
    models = {"torch": ref, "torch twin": copy.deepcopy(ref), "convtune": ours, "stem to torch": mixed,
              "torch, stem frozen": copy.deepcopy(ref), "convtune, stem frozen": copy.deepcopy(ours)}
    if a.extra:
        models.update({"torch, stem no grad": copy.deepcopy(ref), "convtune, stem no grad": copy.deepcopy(ours),
                       "convtune, repack after step": copy.deepcopy(ours)})
        for k in ("torch, stem no grad", "convtune, stem no grad"):
            models[k].conv1.weight.requires_grad_(False)
    if a.only:
        models = {k: m for k, m in models.items() if k in a.only.split(",")}
    probe_x = torch.randn(a.batch, 3, 224, 224, device="cuda")
    stem_node = type(ours.conv1(probe_x).grad_fn).__name__  # what the converted stem runs in a training call
    print(f"converted stem in a training call (batch {a.batch}): grad_fn {stem_node} "
          f"({'torch' if stem_node == 'ConvolutionBackward0' else 'convtune'})")
    opts = {k: torch.optim.SGD([p for n, p in m.named_parameters() if not ("frozen" in k and n == "conv1.weight")],
                               lr=1e-3) for k, m in models.items()}
    x = torch.randn(a.batch, 3, 224, 224, device="cuda")
    target = torch.randint(0, 1000, (a.batch,), device="cuda")

    def step(k: str, ev: list) -> float:
        m, opt = models[k], opts[k]
        t0 = time.perf_counter()
        ev[0].record()
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(m(x), target)
        ev[1].record()
        loss.backward()
        ev[2].record()
        opt.step()
        if k == "convtune, repack after step" and m.conv1._bound is not None:
            bound = m.conv1._bound
            ig.packed_weight(m.conv1.weight, bound.pad_w, bound.vec, bound.round_weight)
        ev[3].record()
        return time.perf_counter() - t0

    names = list(models)
    for k in names:  # warm-up: compile, cuDNN heuristics, allocator
        for _ in range(5):
            step(k, [torch.cuda.Event(enable_timing=True) for _ in range(4)])
    torch.cuda.synchronize()
    per_round: dict[str, list[float]] = {k: [] for k in names}
    parts: dict[str, list[tuple[float, float, float, float]]] = {k: [] for k in names}
    for r in range(a.rounds):
        got: dict[str, list[float]] = {k: [] for k in names}
        for i in range(a.steps):
            for k in names[i % len(names):] + names[:i % len(names)]:
                ev = [torch.cuda.Event(enable_timing=True) for _ in range(4)]
                host = step(k, ev)
                torch.cuda.synchronize()
                total = ev[0].elapsed_time(ev[3])
                got[k].append(total)
                parts[k].append((ev[0].elapsed_time(ev[1]), ev[1].elapsed_time(ev[2]), ev[2].elapsed_time(ev[3]),
                                 1e3 * host))
        for k in names:
            per_round[k].append(statistics.median(got[k]))
        print(f"round {r + 1}: " + ", ".join(f"{k} {statistics.median(got[k]) / statistics.median(got['torch']):.4f}"
                                               for k in names))
    print(f"\nmedian ms per step over {a.rounds} rounds × {a.steps} steps (batch {a.batch}); ratio to torch per round "
          "(min–max); parts: forward / backward / optimizer (GPU timeline), host = time to issue the whole step")
    base = per_round["torch"]
    for k in names:
        ratios = [v / b for v, b in zip(per_round[k], base)]
        fw, bw, op, host = (statistics.median(p[j] for p in parts[k]) for j in range(4))
        print(f"  {k:22s} {statistics.median(per_round[k]):7.3f} ms  ratio {statistics.median(ratios):.4f} "
              f"({min(ratios):.4f}–{max(ratios):.4f})  fwd {fw:6.3f} bwd {bw:6.3f} opt {op:6.3f} host {host:6.3f}")

    print("\nCPU profile, 20 steps each: self CPU µs per step by operator, largest differences convtune - torch")
    cpu: dict[str, collections.Counter] = {}
    for k in ("torch", "convtune"):
        ev = [torch.cuda.Event(enable_timing=True) for _ in range(4)]
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            for _ in range(20):
                step(k, ev)
                torch.cuda.synchronize()
        c = collections.Counter()
        calls = collections.Counter()
        for e in prof.key_averages():
            c[e.key] += e.self_cpu_time_total / 20
            calls[e.key] += e.count / 20
        cpu[k] = c
        cpu[k + " calls"] = calls
        print(f"  {k}: summed self CPU {sum(c.values()) / 1e3:.3f} ms per step")
    keys = set(cpu["torch"]) | set(cpu["convtune"])
    for key in sorted(keys, key=lambda s: -abs(cpu["convtune"].get(s, 0) - cpu["torch"].get(s, 0)))[:20]:
        print(f"  {cpu['convtune'].get(key, 0) - cpu['torch'].get(key, 0):+8.1f}  torch {cpu['torch'].get(key, 0):8.1f} "
              f"({cpu['torch calls'].get(key, 0):4.0f} calls)  convtune {cpu['convtune'].get(key, 0):8.1f} "
              f"({cpu['convtune calls'].get(key, 0):4.0f} calls)  {key[:90]}")


if __name__ == "__main__":
    main()
