"""Where a converted ResNet-50's train step (batch 32) spends its time against torch's: CUDA kernel time per
kernel name from torch.profiler over 10 steps of each model (after warm-up), the kernels whose total differs
most, and each model's summed kernel time against its wall time per step.

    python benchmarks/probe_train_step.py     (GPU, torchvision)
"""
import collections
import time

import torch
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile

from resnet_train_setup import models_and_optimizers

models, opts, x, target = models_and_optimizers()
ref, ours = models["torch"], models["convtune"]


def step(name: str) -> None:
    opts[name].zero_grad(set_to_none=True)
    F.cross_entropy(models[name](x), target).backward()
    opts[name].step()


kernels: dict = {}
for name in models:
    for _ in range(5):
        step(name)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        t0 = time.perf_counter()
        for _ in range(10):
            step(name)
        torch.cuda.synchronize()
        wall = (time.perf_counter() - t0) / 10
    per = collections.Counter()
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            per[e.name] += e.device_time / 10
    kernels[name] = per
    print(f"{name:9s} wall ms/step {1e3 * wall:.3f} · summed kernel ms/step {sum(per.values()) / 1e3:.3f} · "
          f"kernels/step {sum(1 for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA) / 10:.0f}")
diff = {k: kernels["convtune"].get(k, 0) - kernels["torch"].get(k, 0) for k in set(kernels["torch"]) | set(kernels["convtune"])}
print("kernels whose time per step differs most (us, convtune - torch):")
for k, d in sorted(diff.items(), key=lambda kv: -abs(kv[1]))[:12]:
    print(f"  {d:+9.1f}  torch {kernels['torch'].get(k, 0):9.1f}  convtune {kernels['convtune'].get(k, 0):9.1f}  {k[:110]}")
