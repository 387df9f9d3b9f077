"""Issue 13, session 23: nhwc_igemm's last wave split along K (stream-K; benchmarks/nhwc_split_probe.py, a probe module,
not the library) against the same kernel unsplit and against the library's nhwc_igemm, side by side in one process,
interleaved. (The first run had the split in the library's module and the kernel before it as "before", the source the
library has again: "library" here.)

Per problem and per pinned nhwc kernel (as benchmarks/probe_waves.py: `nhwc_preround` on an input rounded beforehand),
the kernel alone on a channels_last input at a few batches up to the problem's own, then, at the problem's batch, the
library's NCHW route (the copy inside the call, NCHW out) where the NCHW key names an nhwc kernel, next to cuDNN in
both layouts. Every output is checked with KernelBench's allclose against torch's; the split's against the unsplit
one's bits (max |diff|).

Prediction written before the first run: the split takes the last wave's idle share off: alexnet_conv5 at
M128-N256-w8 (2.56 waves of one program an SM) 0.236 → about 0.205 ms (-13 %), alexnet_conv4 (3.84 waves) -3 to -4 %,
nothing on resnet50_layer2_3x3 (1.98 waves: not split) and vgg16_conv3_2 (5.94).

    python benchmarks/probe_split.py [--problems a,b] [--points 4]
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import statistics
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "benchmarks"))

from probe_kernels import FAST, load_problem  # noqa: E402
from probe_waves import PROBLEMS, pinned_nhwc  # noqa: E402

from convtune.kernels import library_choice, nhwc_igemm, pins, torch_conv  # noqa: E402
from convtune.kernels.precision import round_to_tf32  # noqa: E402
from convtune.measure import bench  # noqa: E402
from convtune.measure.correctness import torch_output  # noqa: E402
from convtune.measure.one_config import make_inputs  # noqa: E402

ROUNDS = 3


def split_probe():
    """benchmarks/nhwc_split_probe.py as a module (a file of its own: Triton reads a kernel's source)."""
    path = ROOT / "benchmarks" / "nhwc_split_probe.py"
    spec = importlib.util.spec_from_file_location("nhwc_split_probe", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules["nhwc_split_probe"] = mod  # dataclasses look their module up there
    spec.loader.exec_module(mod)
    return mod


def side_by_side(calls: dict, theirs: torch.Tensor, dev) -> tuple[dict, dict, dict]:
    outs = {}
    for label, call in calls.items():
        r = call()
        outs[label] = r.out if hasattr(r, "out") else r
    torch.cuda.synchronize()
    ok = {k: bool(torch.allclose(y, theirs, atol=1e-4, rtol=1e-4)) for k, y in outs.items()}
    times: dict[str, list[float]] = {k: [] for k in calls}
    for _ in range(ROUNDS):
        for k, c in calls.items():
            times[k].append(bench.time_gpu(c, FAST, dev).median_ms)
    return {k: statistics.median(v) for k, v in times.items()}, ok, outs


def probe(name: str, points: int, sp) -> None:
    p = load_problem(name)
    dev = torch.device("cuda")
    x, w, b = make_inputs(p, 0, dev)
    x_cl = x.contiguous(memory_format=torch.channels_last)
    xr_cl = round_to_tf32(x_cl).contiguous(memory_format=torch.channels_last)
    wr = round_to_tf32(w)
    args = (p.stride, p.padding, p.dilation)
    batches = sorted({max(1, round(p.batch * (0.5 + 0.5 * i / (points - 1)))) for i in range(points)})
    torch.backends.cudnn.benchmark = True
    for label, pin in pinned_nhwc(p).items():
        meta, pre = pin.meta, pin.kernel == "nhwc_preround"
        prec, inp_w = ("tf32_trunc", wr) if pre else ("tf32", w)
        print(f"{name}: {label} (the kernel alone, channels_last in and out)", flush=True)
        for n in batches:
            xi = (xr_cl if pre else x_cl)[:n]
            theirs, _ = torch_output(dataclasses.replace(p, batch=n), x[:n], w, b, "tf32")
            calls = {"unsplit": lambda xi=xi: sp.launch(xi, inp_w, b, *args, meta, prec, split_tail=False),
                     "split": lambda xi=xi: sp.launch(xi, inp_w, b, *args, meta, prec),
                     "library": lambda xi=xi: nhwc_igemm.launch(xi, inp_w, b, *args, meta, prec)}
            xc = x_cl[:n]
            calls["cuDNN CL"] = lambda xc=xc: torch_conv.conv2d(xc, w, b, *args, "tf32")
            med, ok, outs = side_by_side(calls, theirs, dev)
            plan = sp.make_plan(sp.geometry(xi, w, *args), b is not None, meta, prec)
            entry = [v for k, v in sp._bound.items() if k[0][0] == plan.binary_key and k[1] == plan.m and k[2]]
            sched = entry[0][3] if entry else None
            diff = float((outs["split"] - outs["unsplit"]).abs().max())
            line = "  ".join(f"{k} {v:.4f}" for k, v in med.items())
            print(f"  n={n:4d} tiles {plan.tiles:5d} {sched}  {line} ms  split/unsplit {med['split'] / med['unsplit']:.3f}"
                  + f"  unsplit/library {med['unsplit'] / med['library']:.3f}"
                  + f"  split vs cuDNN CL {med['cuDNN CL'] / med['split']:.3f}x  |split-unsplit| {diff:.2e}"
                  + f"  allclose {all(ok.values())}", flush=True)
    # the library's NCHW route at the problem's batch, where the NCHW key runs an nhwc kernel
    pin, _ = library_choice(pins.default_path(), torch.cuda.get_device_name(), p, "tf32")
    if not (isinstance(pin, pins.KernelPin) and pin.kernel in ("nhwc_igemm", "nhwc_preround")):
        return
    theirs, _ = torch_output(p, x, w, b, "tf32")
    out = torch.empty(p.output_shape, device=dev)
    pre = pin.kernel == "nhwc_preround"
    calls = {"NCHW route unsplit": sp.prepared(x, w, b, *args, pin.meta, "tf32", out=out, round_input_first=pre,
                                               split_tail=False),
             "NCHW route split": sp.prepared(x, w, b, *args, pin.meta, "tf32", out=out, round_input_first=pre),
             "NCHW route library": nhwc_igemm.prepared(x, w, b, *args, pin.meta, "tf32", out=out,
                                                       round_input_first=pre),
             "cuDNN NCHW": lambda: torch_conv.conv2d(x, w, b, *args, "tf32"),
             "cuDNN CL": lambda: torch_conv.conv2d(x_cl, w, b, *args, "tf32")}
    med, ok, _ = side_by_side(calls, theirs, dev)
    best = min(med["cuDNN NCHW"], med["cuDNN CL"])
    print(f"{name}: the library's NCHW route, {pin.short()}, batch {p.batch}", flush=True)
    for k, ms in med.items():
        print(f"  {k:20s} {ms:8.4f} ms  {best / ms:5.3f}x cuDNN's best layout  allclose {ok[k]}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--problems", default=PROBLEMS)
    ap.add_argument("--points", type=int, default=4)
    a = ap.parse_args()
    print(torch.cuda.get_device_name(), torch.__version__, flush=True)
    sp = split_probe()
    for name in a.problems.split(","):
        probe(name, a.points, sp)


if __name__ == "__main__":
    main()
