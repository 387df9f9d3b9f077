"""Issue 13, session 25: the NCHW route's copy to channels_last hidden behind the convolution, in chunks of images.

The library's NCHW route for an nhwc kernel copies the whole input to channels_last (kernels/layout.py), then runs the
convolution: the copy is memory-bound, the convolution bound by its MMAs, and they run one after the other. The copy
is 10-18 % of the route's time on the four stride-1 NCHW rows still under 0.9x cuDNN's faster layout: 0.0396 ms of
alexnet_conv4's 0.4107 (layout copy alone, docs/evidence/h200_issue13_layout_copy.txt; route: session 22's table),
0.0400 of conv5's 0.2785, 0.0277 of conv3's 0.2844 and 0.0175 of resnet50_layer2_3x3's 0.0874 (0.0158 in situ:
nchw→cl 0.0818 against cl→cl 0.0660, docs/evidence/h200_issue13_kernel_pins_copy.txt).

Here the batch is cut into chunks: chunk k's copy runs on a copy stream, its convolution (nhwc_igemm.run on the chunk's
plan, as the library's route runs it) on a conv stream once that copy is done, so that chunk k + 1's copy can run
while chunk k's convolution does, on the SMs' spare shared memory, registers and DRAM bandwidth. With two conv
streams, chunk k + 1's convolution can also start while chunk k's last wave drains. The caller's stream waits for all,
so the time is the whole call's (bench.time_gpu's events on the caller's stream).

Variants per problem: chunks 2 and 4, one or two conv streams, the copy's tile 64 × 64 (the library's) or 32 × 32
(4 KB of shared memory instead of 16 KB: more room to run beside the convolution's programs); "1 chunk" is the
library's route through this machinery (its overhead). Next to the library's own route and cuDNN in both layouts. Every
output checked with KernelBench's allclose against torch's, and against the library's route by max |diff| (a chunk's
rows are fewer, so its last wave may split differently: sums in another order).

Prediction written before any run (session 25, no GPU lent): where the convolution's programs leave room on an SM
(alexnet_conv3/conv4's M128-N128-w4-s3 at two an SM: 2 × 96 KB), the later chunks' copies hide: conv4 0.4107 →
0.375-0.385 ms (0.92-0.95x cuDNN channels_last's 0.3553), conv3 0.284 → 0.262-0.27; where they fill an SM's shared
memory (conv5's M128-N256-w8-s4 at one an SM, 196 KB; layer2's M64-N128-w4-s3 at three, 3 × 72 KB) little hides, and
the chunks' smaller grids cost waves: conv5 and layer2 within ±3 % of the library's route, two conv streams better
than one there.

    python benchmarks/probe_overlap.py [--problems a,b]
"""

from __future__ import annotations

import argparse
import itertools
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "benchmarks"))

from probe_kernels import load_problem, side_by_side  # noqa: E402  (each call's median of 3 rounds, interleaved)

from convtune.kernels import library_choice, nhwc_igemm, pins, torch_conv  # noqa: E402
from convtune.kernels.layout import to_channels_last  # noqa: E402
from convtune.measure.correctness import torch_output  # noqa: E402
from convtune.measure.one_config import make_inputs  # noqa: E402

PROBLEMS = "alexnet_conv4,alexnet_conv3,alexnet_conv5,resnet50_layer2_3x3,alexnet_conv2"
VARIANTS = [(1, 1, 64), (2, 1, 64), (2, 2, 64), (2, 2, 32), (4, 1, 64), (4, 2, 64), (4, 2, 32)]  # chunks, streams, tile


class Overlapped:
    """The NCHW route in `chunks` chunks of images: copies on a stream of their own, convolutions on `conv_streams`
    streams in turn, each after its chunk's copy; the caller's stream waits for them all."""

    def __init__(self, x, w, b, args, meta, pre: bool, out, chunks: int, conv_streams: int, tile: int):
        n = x.shape[0]
        cuts = [round(i * n / chunks) for i in range(chunks + 1)]
        self.w, self.b, self.out, self.tile = w, b, out, tile
        self.parts = []
        for k0, k1 in itertools.pairwise(cuts):
            plan, _ = nhwc_igemm._checked_plan(x[k0:k1], w, b, *args, meta, "tf32", out[k0:k1], 1, True, pre)
            self.parts.append((plan, x[k0:k1], out[k0:k1], torch.cuda.Event()))
        self.copy_stream = torch.cuda.Stream(x.device)
        self.conv_streams = [torch.cuda.Stream(x.device) for _ in range(conv_streams)]

    def __call__(self) -> torch.Tensor:
        caller = torch.cuda.current_stream()
        for s in [self.copy_stream, *self.conv_streams]:
            s.wait_stream(caller)  # the input is the caller's; and the last call's chunks are read before reuse
        copies = []
        with torch.cuda.stream(self.copy_stream):
            for plan, xk, _, done in self.parts:
                copies.append(to_channels_last(xk, self.tile, self.tile, 4, round_to_nearest_tf32=plan.input_rounded))
                done.record()
        for i, ((plan, _, outk, done), xk) in enumerate(zip(self.parts, copies)):
            s = self.conv_streams[i % len(self.conv_streams)]
            with torch.cuda.stream(s):
                s.wait_event(done)
                nhwc_igemm.run(plan, xk, self.w, self.b, outk)
            xk.record_stream(s)  # made on the copy stream, read on s: not reused before s is past this point
        for s in self.conv_streams:
            caller.wait_stream(s)
        return self.out


def probe(name: str) -> None:
    p = load_problem(name)
    dev = torch.device("cuda")
    pin, _ = library_choice(pins.default_path(), torch.cuda.get_device_name(), p, "tf32")  # the NCHW key's
    if not (isinstance(pin, pins.KernelPin) and pin.kernel in ("nhwc_igemm", "nhwc_preround")):
        print(f"{name}: the NCHW key's pin is {getattr(pin, 'short', lambda: pin)()}, not an nhwc kernel: skipped",
              flush=True)
        return
    x, w, b = make_inputs(p, 0, dev)
    x_cl = x.contiguous(memory_format=torch.channels_last)
    args = (p.stride, p.padding, p.dilation)
    torch.backends.cudnn.benchmark = True
    theirs, _ = torch_output(p, x, w, b, "tf32")
    pre = pin.kernel == "nhwc_preround"
    outs = {}
    calls = {"library route": nhwc_igemm.prepared(x, w, b, *args, pin.meta, "tf32",
                                                  out=torch.empty(p.output_shape, device=dev), round_input_first=pre)}
    for chunks, streams, tile in VARIANTS:
        outs[(chunks, streams, tile)] = torch.empty(p.output_shape, device=dev)
        calls[f"{chunks} chunk(s), {streams} conv stream(s), copy tile {tile}"] = Overlapped(
            x, w, b, args, pin.meta, pre, outs[(chunks, streams, tile)], chunks, streams, tile)
    calls["cuDNN NCHW"] = lambda: torch_conv.conv2d(x, w, b, *args, "tf32")
    calls["cuDNN CL"] = lambda: torch_conv.conv2d(x_cl, w, b, *args, "tf32")
    med, ok, got = side_by_side(calls, theirs, dev)
    best = min(med["cuDNN NCHW"], med["cuDNN CL"])
    print(f"{name}: {pin.short()}, batch {p.batch}, NCHW in and out", flush=True)
    for k, ms in med.items():
        diff = float((got[k] - got["library route"]).abs().max())
        print(f"  {k:42s} {ms:8.4f} ms  {best / ms:5.3f}x cuDNN's best layout  "
              f"{med['library route'] / ms:5.3f}x the library's route  |diff| {diff:.1e}  allclose {ok[k]}",
              flush=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--problems", default=PROBLEMS)
    a = ap.parse_args()
    print(torch.cuda.get_device_name(), torch.__version__, flush=True)
    for name in a.problems.split(","):
        probe(name)


if __name__ == "__main__":
    main()
