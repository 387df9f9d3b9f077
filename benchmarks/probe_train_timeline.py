"""Where the converted ResNet-50's train step (batch 32) lets the GPU wait: a torch.profiler timeline (CPU and
CUDA, one clock) of 12 steps of torch's model and of the converted one. Per step: when each of the first
kernels starts (from the step's start on the host), how long the GPU idles before it, and the forward's and
backward's GPU idle in total; medians over the steps. Then the host time of the stem's call in a train step,
split into its parts (perf_counter around each, no profiler).

    python benchmarks/probe_train_timeline.py     (GPU, torchvision)
"""
import statistics
import time

import torch
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile, record_function

from resnet_train_setup import models_and_optimizers
from convtune import functional
from convtune.kernels import implicit_gemm as ig

models, opts, x, target = models_and_optimizers()
ref, ours = models["torch"], models["convtune"]


def step(name: str) -> None:
    with record_function("step"):
        opts[name].zero_grad(set_to_none=True)
        with record_function("fwd"):
            loss = F.cross_entropy(models[name](x), target)
        torch.cuda._sleep(1)  # a marker kernel: the GPU's end of the forward
        loss.backward()
        opts[name].step()


def idle(seq: list, start: float) -> float:
    return sum(max(0.0, k[0] - p) for k, p in zip(seq, [start] + [k[1] for k in seq[:-1]]))


FIRST = 10
for name in models:
    for _ in range(5):
        step(name)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(12):
            step(name)
            torch.cuda.synchronize()
    evs = prof.events()
    cpu = torch.autograd.DeviceType.CPU
    steps = sorted((e.time_range.start, e.time_range.end) for e in evs if e.name == "step" and e.device_type == cpu)
    fwds = sorted(e.time_range.end for e in evs if e.name == "fwd" and e.device_type == cpu)
    kernels = sorted((e.time_range.start, e.time_range.end, e.name) for e in evs
                     if e.device_type == torch.autograd.DeviceType.CUDA and e.time_range.end > e.time_range.start)
    rows: list[list[tuple[float, float, float]]] = [[] for _ in range(FIRST)]
    names: list[str] = [""] * FIRST
    idle_f, idle_b, fwd_host, fwd_gpu_end, step_gpu_end = [], [], [], [], []
    bounds = [s0 for s0, _ in steps] + [1e30]
    for i, ((s0, s1), f1) in enumerate(zip(steps, fwds)):
        ks = [k for k in kernels if s0 <= k[0] < bounds[i + 1]]
        marker = next((j for j, k in enumerate(ks) if "sleep" in k[2].lower() or "spin" in k[2].lower()), None)
        if not ks or marker is None:
            continue
        prev = s0
        for j, (k0, k1, kn) in enumerate(ks[:FIRST]):
            rows[j].append((k0 - s0, k0 - prev, k1 - k0))
            names[j] = kn
            prev = k1
        fwk, bwk = ks[:marker], ks[marker + 1:]
        idle_f.append(idle(fwk, fwk[0][0]))
        idle_b.append(idle(bwk, ks[marker][1]))
        fwd_host.append(f1 - s0)
        fwd_gpu_end.append(fwk[-1][1] - s0)
        step_gpu_end.append(ks[-1][1] - s0)
    print(f"== {name}: medians over {len(idle_f)} steps, µs from the step's start on the host")
    print(f"   forward issued by {statistics.median(fwd_host):8.1f} · forward's last kernel ends "
          f"{statistics.median(fwd_gpu_end):8.1f} · GPU idle inside forward {statistics.median(idle_f):7.1f} · inside "
          f"backward+step {statistics.median(idle_b):7.1f} · last kernel ends {statistics.median(step_gpu_end):8.1f}")
    for j in range(FIRST):
        if rows[j]:
            st, gap, dur = (statistics.median(r[i] for r in rows[j]) for i in range(3))
            print(f"   kernel {j:2d} starts {st:8.1f} idle before {gap:7.1f} runs {dur:7.1f}  {names[j][:80]}")

# the stem's host time in a train step, in parts
stem = ours.conv1
bound = stem._bound
t_parts: dict[str, list[float]] = {k: [] for k in ("module call", "Function.apply", "bound.launch", "packed_weight",
                                                    "runner", "torch module call")}
orig_apply, orig_launch, orig_pw = functional._EagerConv.apply, functional.Bound.launch, ig.packed_weight


def timed(key, fn):
    def wrap(*a, **k):
        t0 = time.perf_counter_ns()
        r = fn(*a, **k)
        t_parts[key].append((time.perf_counter_ns() - t0) / 1e3)
        return r
    return wrap


functional._EagerConv.apply = timed("Function.apply", orig_apply)
functional.Bound.launch = timed("bound.launch", orig_launch)
ig.packed_weight = timed("packed_weight", orig_pw)
if bound is not None:
    bound.launch_bound = timed("runner", bound.launch_bound)
stem.__dict__["forward"] = timed("module call", stem.forward)  # not setattr: that drops the bound call
ref.conv1.__dict__["forward"] = timed("torch module call", ref.conv1.forward)
for _ in range(30):
    for name in models:
        step(name)
        torch.cuda.synchronize()
print("stem call in a train step, host µs (median of 30 steps; parts nest: module call ⊃ Function.apply ⊃ "
      "bound.launch ⊃ packed_weight, runner; and torch's stem): " +
      ", ".join(f"{k} {statistics.median(v):.1f}" for k, v in t_parts.items() if v))
