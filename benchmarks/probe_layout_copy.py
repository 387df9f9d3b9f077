"""Issue 13, session 12: the NCHW → channels_last copy, torch's against kernels.layout's at several tile sizes,
on the inputs of the suite's stride-1 layers (and L1 #50's), in one process: median of interleaved rounds
(L2 flushed), as GB/s of bytes read + written. Each of our copies is first compared with torch's, bit for bit.

    python benchmarks/probe_layout_copy.py
"""

from __future__ import annotations

import itertools
import statistics
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "benchmarks"))

from probe_kernels import FAST, load_problem  # noqa: E402
from probe_nhwc import STRIDE_1  # noqa: E402

from convtune.kernels.layout import to_channels_last  # noqa: E402
from convtune.measure import bench  # noqa: E402

TILES = [t for t in itertools.product((32, 64, 128), (32, 64, 128), (4, 8)) if t[0] * t[1] <= 128 * 64]
ROUNDS = 3


def main() -> None:
    print(torch.cuda.get_device_name(), torch.__version__, flush=True)
    dev = torch.device("cuda")
    wins: dict[tuple, list[float]] = {t: [] for t in TILES}
    for name in STRIDE_1.split(",") + ["kernelbench_l1_50"]:
        p = load_problem(name)
        x = torch.randn(p.batch, p.in_channels, p.height, p.width, device=dev)
        want = x.contiguous(memory_format=torch.channels_last)
        calls = {"torch": lambda: x.contiguous(memory_format=torch.channels_last)}
        for t in TILES:
            assert torch.equal(to_channels_last(x, *t), want), (name, t)
            calls[t] = (lambda t: lambda: to_channels_last(x, *t))(t)
        times: dict = {k: [] for k in calls}
        for _ in range(ROUNDS):
            for k, call in calls.items():
                times[k].append(bench.time_gpu(call, FAST, dev).median_ms)
        med = {k: statistics.median(v) for k, v in times.items()}
        gbs = lambda ms: 2 * x.numel() * 4 / ms / 1e6  # noqa: E731
        best = min(TILES, key=lambda t: med[t])
        print(f"{name:22s} {tuple(x.shape)} {x.numel() * 4 / 1e6:.0f} MB: torch {med['torch']:.4f} ms "
              f"({gbs(med['torch']):.0f} GB/s); ours best {best} {med[best]:.4f} ms ({gbs(med[best]):.0f} GB/s, "
              f"{med['torch'] / med[best]:.2f}x); 64x64 w4 {med[(64, 64, 4)]:.4f} ms", flush=True)
        for t in TILES:
            wins[t].append(med[t] / med[best])
    print("tile (C, P, warps): geomean of time / the problem's best tile")
    for t in sorted(TILES, key=lambda t: statistics.geometric_mean(wins[t])):
        print(f"  {t}: {statistics.geometric_mean(wins[t]):.3f}  worst {max(wins[t]):.3f}")


if __name__ == "__main__":
    main()
