"""Host time of the stem call inside a ResNet-50 forward (batch 32), for three stems in the same converted
model: torch's, convtune.nn.Conv2d, and a bare Triton launch of the same plan (output allocation included);
in eval mode without gradients, and in train mode with them (torch and convtune only).
Forward pre/post hooks with perf_counter; 60 forwards after 5 warm-ups; medians.

    python benchmarks/probe_stem_in_model.py     (GPU, torchvision)
"""
import statistics
import time

import torch
import torchvision

import convtune
from convtune import functional
from convtune.kernels import implicit_gemm as ig

torch.manual_seed(0)
model = torchvision.models.resnet50().cuda().eval()
x = torch.randn(32, 3, 224, 224, device="cuda")
convtune.nn.convert(model)
stem = model.conv1
w = stem.weight.detach()
plan = functional._plan(x, w, None, (2, 2), (3, 3), (1, 1), 1, "tf32")
packed = ig.packed_weight(w, plan.pad_w, plan.vec, plan.round_weight)


class Bare(torch.nn.Module):
    def forward(self, t):
        out = torch.empty(plan.out_shape, device="cuda")
        ig._conv2d_igemm_kernel[plan.grid](t, packed, t, out, **plan.constexprs, LLVM_OPT="O3")
        return out


variants = {"torch": None, "convtune.nn.Conv2d": None, "bare triton launch": Bare()}


def stem_as(name: str) -> None:
    if name == "torch":
        stem.__class__ = torch.nn.Conv2d
        model.conv1 = stem
    elif name == "convtune.nn.Conv2d":
        stem.__class__ = convtune.nn.Conv2d
        model.conv1 = stem
    else:
        model.conv1 = variants[name]


for mode in ("eval", "train"):  # eval: no gradients; train: forward with gradients (the stem's weight needs one)
    getattr(model, mode)()
    times: dict = {k: [] for k in variants}
    whole: dict = {k: [] for k in variants}
    for name in variants if mode == "eval" else ("torch", "convtune.nn.Conv2d"):
        stem_as(name)
        pre = model.conv1.register_forward_pre_hook(lambda m, a: times["_"].append(-time.perf_counter()))
        post = model.conv1.register_forward_hook(lambda m, a, o: times["_"].__setitem__(-1, times["_"][-1] + time.perf_counter()))
        times["_"] = []
        with torch.set_grad_enabled(mode == "train"):
            for _ in range(5):
                model(x)
            torch.cuda.synchronize()
            times["_"].clear()
            for _ in range(60):
                t0 = time.perf_counter(); y = model(x); whole[name].append(time.perf_counter() - t0); torch.cuda.synchronize()
                del y
        times[name] = times.pop("_")
        pre.remove(), post.remove()
        print(f"{mode}: {name:20s} stem host us in model: median {1e6 * statistics.median(times[name]):7.1f} · "
              f"whole forward host enqueue ms median {1e3 * statistics.median(whole[name]):.3f}")
    stem_as("torch")
