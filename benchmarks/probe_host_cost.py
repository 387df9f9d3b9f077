"""Host time of one convolution call with an idle GPU (ResNet-50 conv1 at batch 32): torch, convtune's module, the
library call, the launcher and a bare Triton launch, then a cProfile of the module path.

    python benchmarks/probe_host_cost.py     (GPU)
"""
import cProfile
import pstats

import torch

import convtune
from convtune.kernels import implicit_gemm as ig
from host_timing import host_us

x = torch.randn(32, 3, 224, 224, device="cuda")
ours = convtune.nn.Conv2d(3, 64, 7, 2, 3, bias=False).cuda()
theirs = torch.nn.Conv2d(3, 64, 7, 2, 3, bias=False).cuda()
w = ours.weight.detach()
plan = convtune.functional._plan(x, w, None, (2, 2), (3, 3), (1, 1), 1, "tf32")
out = torch.empty(plan.out_shape, device="cuda")


with torch.no_grad():
    for name, f in (("torch.nn.Conv2d", lambda: theirs(x)), ("convtune.nn.Conv2d", lambda: ours(x)),
                    ("convtune.conv2d", lambda: convtune.conv2d(x, w, None, 2, 3)),
                    ("ig.run(plan)", lambda: ig.run(plan, x, w, None, out)),
                    ("bare launch", lambda: ig._conv2d_igemm_kernel[plan.grid](x, ig.packed_weight(w, plan.pad_w, plan.vec, plan.round_weight), x, out, **plan.constexprs, LLVM_OPT="O3"))):
        print(f"{name:20s} host us/call (idle GPU, median of 300): {host_us(f):8.1f}")
    pr = cProfile.Profile()
    pr.enable()
    for _ in range(300):
        ours(x); torch.cuda.synchronize()
    pr.disable()
    pstats.Stats(pr).sort_stats("tottime").print_stats(22)
