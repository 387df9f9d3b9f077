"""Issue 13, session 23: do the stride-1 layers still under 0.9x lose time to the last wave of tiles?

A non-persistent kernel runs tiles in waves of (SMs x resident programs an SM). alexnet_conv4/5 have 256 x 13 x 13 =
43,264 output rows: 338 tiles of 128 rows, 2.56 waves of one program a SM (alexnet_conv5 at M128-N256-w8-s4), so the
third wave runs 56 % full. If the kernel's time steps with ceil(waves) rather than growing with the batch, a persistent
kernel that splits the last wave's tiles along K (stream-K) would buy back up to (ceil - waves) / ceil of it.

Per problem and per pinned nhwc kernel (its NCHW and channels_last keys' pins; `nhwc_preround` timed on an input
rounded beforehand, as its kernel runs after the copy), the kernel alone on a channels_last input at batches from
half the problem's to all of it, with cuDNN channels_last at the same batches: ms, tiles, resident programs an SM
(from the compiled kernel's registers and shared memory), waves, and ms per full wave. Every output is checked with
KernelBench's allclose against torch's.

    python benchmarks/probe_waves.py [--problems a,b] [--points 12]
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "benchmarks"))

from probe_kernels import FAST, load_problem  # noqa: E402

from convtune.kernels import library_choice, nhwc_igemm, pins, torch_conv  # noqa: E402
from convtune.kernels.precision import round_to_tf32  # noqa: E402
from convtune.measure import bench  # noqa: E402
from convtune.measure.correctness import torch_output  # noqa: E402
from convtune.measure.occupancy import occupancy  # noqa: E402
from convtune.measure.one_config import make_inputs  # noqa: E402

PROBLEMS = "alexnet_conv4,alexnet_conv5,resnet50_layer2_3x3,alexnet_conv3,alexnet_conv2,vgg16_conv3_2"


def pinned_nhwc(p) -> dict:
    """The problem's NCHW and channels_last pins that run an nhwc kernel: {label: KernelPin}."""
    found = {}
    for layout in ("nchw", "channels_last"):
        pin, _ = library_choice(pins.default_path(), torch.cuda.get_device_name(), dataclasses.replace(p, layout=layout),
                                "tf32")
        if isinstance(pin, pins.KernelPin) and pin.kernel in ("nhwc_igemm", "nhwc_preround"):
            found.setdefault(pin.short(), pin)
    return found


def probe(name: str, points: int, sms: int) -> None:
    p = load_problem(name)
    dev = torch.device("cuda")
    x, w, b = make_inputs(p, 0, dev)
    x_cl = x.contiguous(memory_format=torch.channels_last)
    xr_cl = round_to_tf32(x_cl).contiguous(memory_format=torch.channels_last)
    wr = round_to_tf32(w)
    args = (p.stride, p.padding, p.dilation)
    rows_per_image = p.out_h * p.out_w
    batches = sorted({max(1, round(p.batch * (0.5 + 0.5 * i / (points - 1)))) for i in range(points)})
    torch.backends.cudnn.benchmark = True
    for label, pin in pinned_nhwc(p).items():
        meta = pin.meta
        pre = pin.kernel == "nhwc_preround"
        print(f"{name}: {label}", flush=True)
        print(f"  {'batch':>5s} {'tiles':>6s} {'slots':>5s} {'waves':>6s} {'ours ms':>8s} {'ms/wave':>8s} "
              f"{'cuDNN CL':>8s} {'ours/cuDNN':>10s} allclose", flush=True)
        for n in batches:
            xi = (xr_cl if pre else x_cl)[:n]
            pn = dataclasses.replace(p, batch=n)
            call = (lambda xi=xi: nhwc_igemm.launch(xi, wr, b, *args, meta, "tf32_trunc")) if pre else \
                   (lambda xi=xi: nhwc_igemm.launch(xi, w, b, *args, meta, "tf32"))
            r = call()
            torch.cuda.synchronize()
            theirs, _ = torch_output(pn, x[:n], w, b, "tf32")
            ok = bool(torch.allclose(r.out, theirs, atol=1e-4, rtol=1e-4))
            occ = occupancy(r.n_regs, r.shared_bytes or 0, meta.num_warps)
            tiles = math.ceil(n * rows_per_image / meta.BLOCK_M) * math.ceil(p.out_channels / meta.BLOCK_N)
            slots = sms * occ.blocks_per_sm
            ours = bench.time_gpu(call, FAST, dev).median_ms
            xc = x_cl[:n]
            cudnn = bench.time_gpu(lambda xc=xc: torch_conv.conv2d(xc, w, b, *args, "tf32"), FAST, dev).median_ms
            waves = tiles / slots
            print(f"  {n:5d} {tiles:6d} {slots:5d} {waves:6.2f} {ours:8.4f} {ours / math.ceil(waves):8.4f} "
                  f"{cudnn:8.4f} {ours / cudnn:10.3f} {ok}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--problems", default=PROBLEMS)
    ap.add_argument("--points", type=int, default=12)
    a = ap.parse_args()
    props = torch.cuda.get_device_properties(0)
    print(props.name, torch.__version__, f"{props.multi_processor_count} SMs", flush=True)
    for name in a.problems.split(","):
        probe(name, a.points, props.multi_processor_count)


if __name__ == "__main__":
    main()
