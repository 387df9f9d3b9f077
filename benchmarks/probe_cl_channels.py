"""Which kernel a channels_last input should run, by its channel count (the library's kernels.library_variant):
nhwc_igemm reading the input as it is, or implicit_gemm on an NCHW copy made inside the call (writing the
channels_last output itself), each at its default configuration, next to cuDNN channels_last, timed alternately
in one process by the tracker's own timing (bench.time_gpu). Prints a table; run on a GPU.

    python benchmarks/probe_cl_channels.py
"""

import torch
import torch.nn.functional as F

from convtune.kernels import get_variant
from convtune.measure.bench import TimingSettings, time_gpu

torch.backends.cudnn.benchmark = True
torch.backends.cudnn.allow_tf32 = True
S = TimingSettings("events", 5, 20, 3, True)
dev = torch.device("cuda")
SHAPES = [  # (label, n, h, w, c_out, k, stride, padding)
    ("3x3 s1 56x56 ->64", 32, 56, 56, 64, 3, 1, 1),
    ("3x3 s1 28x28 ->128", 32, 28, 28, 128, 3, 1, 1),
    ("7x7 s2 112x112 ->64", 32, 112, 112, 64, 7, 2, 3),
]
print(f"{'shape':<22} {'C_in':>4}  {'nhwc_igemm ms':>13} {'implicit_gemm ms':>16} {'cuDNN CL ms':>11}  faster")
for label, n, h, w, c_out, k, stride, pad in SHAPES:
    for c in (4, 8, 12, 16, 24, 32, 64):
        x = torch.randn(n, c, h, w, device=dev).contiguous(memory_format=torch.channels_last)
        wt = torch.randn(c_out, c, k, k, device=dev) / (c * k * k) ** 0.5
        times = {}
        for name in ("nhwc_igemm", "implicit_gemm"):
            v = get_variant(name)
            meta = v.default_meta(c_out, stride, w, "tf32")
            out = torch.empty(n, c_out, (h + 2 * pad - k) // stride + 1, (w + 2 * pad - k) // stride + 1, device=dev,
                              memory_format=torch.channels_last)
            v.launch(x, wt, None, stride, pad, 1, meta, "tf32", out=out)
            ref = F.conv2d(x.double(), wt.double(), None, stride, pad)
            rel = float((out.double() - ref).norm() / ref.norm())
            assert rel < 5e-3, (label, c, name, rel)
            times[name] = time_gpu(lambda: v.launch(x, wt, None, stride, pad, 1, meta, "tf32", out=out), S, dev).median_ms
        wl = wt.contiguous(memory_format=torch.channels_last)
        cudnn = time_gpu(lambda: F.conv2d(x, wl, None, stride, pad), S, dev).median_ms
        best = min(times, key=times.get)
        print(f"{label:<22} {c:>4}  {times['nhwc_igemm']:>13.4f} {times['implicit_gemm']:>16.4f} {cudnn:>11.4f}  {best}")

# An NCHW input on the suite's stride-1 layers: implicit_gemm reading it as it is, or nhwc_igemm on a
# channels_last copy made inside the call (writing the NCHW output itself), against cuDNN's faster layout.
SUITE = [  # (problem, n, c, h, w, c_out, k, padding)
    ("alexnet_conv2", 256, 96, 27, 27, 256, 5, 2), ("alexnet_conv3", 256, 256, 13, 13, 384, 3, 1),
    ("alexnet_conv4", 256, 384, 13, 13, 384, 3, 1), ("alexnet_conv5", 256, 384, 13, 13, 256, 3, 1),
    ("vgg16_conv3_2", 32, 256, 56, 56, 256, 3, 1), ("resnet50_layer1_1x1", 64, 256, 56, 56, 64, 1, 0),
    ("resnet50_layer2_3x3", 64, 128, 28, 28, 128, 3, 1),
]
print()
print(f"{'NCHW input':<22} {'C_in':>4}  {'nhwc_igemm ms':>13} {'implicit_gemm ms':>16} {'cuDNN best ms':>13}  faster")
for label, n, c, h, w, c_out, k, pad in SUITE:
    x = torch.randn(n, c, h, w, device=dev)
    wt = torch.randn(c_out, c, k, k, device=dev) / (c * k * k) ** 0.5
    out = torch.empty(n, c_out, h + 2 * pad - k + 1, w + 2 * pad - k + 1, device=dev)
    times = {}
    for name in ("nhwc_igemm", "implicit_gemm"):
        v = get_variant(name)
        meta = v.default_meta(c_out, 1, w, "tf32")
        times[name] = time_gpu(lambda: v.launch(x, wt, None, 1, pad, 1, meta, "tf32", out=out), S, dev).median_ms
    wl = wt.contiguous(memory_format=torch.channels_last)
    xl = x.contiguous(memory_format=torch.channels_last)
    cudnn = min(time_gpu(lambda: F.conv2d(x, wt, None, 1, pad), S, dev).median_ms,
                time_gpu(lambda: F.conv2d(xl, wl, None, 1, pad), S, dev).median_ms)
    best = min(times, key=times.get)
    print(f"{label:<22} {c:>4}  {times['nhwc_igemm']:>13.4f} {times['implicit_gemm']:>16.4f} {cudnn:>13.4f}  {best}")
