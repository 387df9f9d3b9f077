"""Host time of one nhwc_preround call with an idle GPU, part by part (alexnet_conv3 at batch 256, NCHW input):
torch's convolution, the contest's prepared call (what the library runs per call once it has a plan), the
rounding copy alone, nhwc_igemm.run alone (weight cache, llvm_opt key, TMA descriptor, Triton's launch), the TMA
descriptor alone, and the two bare Triton launches; then a cProfile of the prepared call. Session 13 measured
that call 0.05-0.08 ms of host work above cuDNN's from an idle GPU (docs/PERFORMANCE.md): where does it go?

    python benchmarks/probe_host_cost_nhwc.py     (GPU)
"""
import cProfile
import pstats
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from convtune.kernels import Meta, layout, nhwc_igemm as nhwc  # noqa: E402
from host_timing import host_us  # noqa: E402
from convtune.kernels.common import geometry  # noqa: E402

torch.backends.cudnn.benchmark = True
x = torch.randn(256, 256, 13, 13, device="cuda")
w = torch.randn(384, 256, 3, 3, device="cuda") / 48
b = torch.randn(384, device="cuda")
meta = Meta(BLOCK_M=128, BLOCK_N=128, BLOCK_K=32, num_warps=4, num_stages=3)
out = torch.empty(256, 384, 13, 13, device="cuda")
call = nhwc.prepared_preround(x, w, b, 1, 1, 1, meta, "tf32", out=out)
plan = nhwc.make_plan(geometry(x, w, 1, 1, 1), True, meta, "tf32", False, True, True)
xr = nhwc.round_input(x, plan)
wp = nhwc.packed_weight(w, True)


def descriptor():
    from triton.tools.tensor_descriptor import TensorDescriptor
    return TensorDescriptor.from_tensor(wp.view(wp.shape[0], -1), [128, 32])


def bare_conv():
    nhwc._launch(plan.constexprs, xr, wp, b, out, plan.m, "O3")


print(torch.cuda.get_device_name(), torch.__version__)
with torch.no_grad():
    for name, f in (("torch F.conv2d (cuDNN)", lambda: F.conv2d(x, w, b, 1, 1)),
                    ("prepared nhwc_preround", call),
                    ("rounding copy alone", lambda: layout.to_channels_last(x, round_to_nearest_tf32=True)),
                    ("nhwc.run alone", lambda: nhwc.run(plan, xr, w, b, out)),
                    ("packed_weight lookup", lambda: nhwc.packed_weight(w, True)),
                    ("TMA descriptor alone", descriptor),
                    ("conv launch (_launch)", bare_conv)):
        print(f"{name:24s} host us/call (idle GPU, median of 300): {host_us(f):8.1f}", flush=True)
    pr = cProfile.Profile()
    pr.enable()
    for _ in range(200):
        call()
        torch.cuda.synchronize()
    pr.disable()
    pstats.Stats(pr).sort_stats("tottime").print_stats(18)
