"""Issue 13, session 27: what a call of nhwc_split_n costs the host, next to nhwc_preround's and torch's. The first
promote of alexnet_conv4 NCHW (gpu_session27b.sh) found nhwc_split_n fastest on GPU time (0.3861 ms against the
nhwc_preround pin's 0.4088 and torch's 0.4504) and slowest from an idle GPU (0.5810 against 0.5633 and 0.5489), so
the contest's host rule gave the key to torch. Since then the second launch goes past Triton's dispatch on its stream
(no stream switch), the fork and join reuse two events, and the weight's TMA descriptors are made once.

Prediction, written before the run: the host time of a call of nhwc_split_n about 30-40 us under the first version's
(from an idle GPU about 0.54-0.55 ms against torch's ~0.55), and within 20 us of nhwc_preround's.

Per layout of alexnet_conv4, each call as the contest makes it (the variant's `prepared`): host us per call (100 calls
queued without waiting, so the GPU never holds the host up), GPU ms (bench FAST), and from an idle GPU (the
contest's _from_idle_gpu_ms, median of 30), in interleaved rounds.

    python benchmarks/probe_host_split_n.py
"""

from __future__ import annotations

import dataclasses
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "benchmarks"))

from probe_kernels import FAST, load_problem  # noqa: E402

from convtune.kernels import Meta, get_variant, torch_conv  # noqa: E402
from convtune.measure import bench  # noqa: E402
from convtune.measure.one_config import make_inputs  # noqa: E402
from convtune.tune.contest import _from_idle_gpu_ms  # noqa: E402


def host_us(call, n: int = 100) -> float:
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(n):
        call()
    t1 = time.perf_counter()
    torch.cuda.synchronize()
    return (t1 - t0) / n * 1e6


def main() -> None:
    print(torch.cuda.get_device_name(), torch.__version__, flush=True)
    dev = torch.device("cuda")
    p0 = load_problem("alexnet_conv4")
    for layout in ("nchw", "channels_last"):
        p = dataclasses.replace(p0, layout=layout)
        x, w, b = make_inputs(p, 0, dev)
        fmt = torch.channels_last if layout == "channels_last" else torch.contiguous_format
        x = x.contiguous(memory_format=fmt)
        args = (p0.stride, p0.padding, p0.dilation)
        torch.backends.cudnn.benchmark = True

        def out(fmt=fmt):
            return torch.empty(p0.output_shape, device=dev, memory_format=fmt)
        calls = {
            "torch": lambda x=x, w=w, b=b, args=args: torch_conv.conv2d(x, w, b, *args, "tf32"),
            "nhwc_preround M128-N128-K32-w4-s3": get_variant("nhwc_preround").prepared(
                x, w, b, *args, Meta(128, 128, 32, 4, 3), "tf32", out=out()),
            "nhwc_split_n M128-N256-K32-w8-s4": get_variant("nhwc_split_n").prepared(
                x, w, b, *args, Meta(128, 256, 32, 8, 4), "tf32", out=out()),
        }
        for c in calls.values():
            c()
        torch.cuda.synchronize()
        host, gpu, idle = ({k: [] for k in calls} for _ in range(3))
        for _ in range(3):
            for k, c in calls.items():
                host[k].append(host_us(c))
                gpu[k].append(bench.time_gpu(c, FAST, dev).median_ms)
                idle[k].append(statistics.median(_from_idle_gpu_ms(c, dev) for _ in range(30)))
        print(f"alexnet_conv4 {layout}:", flush=True)
        for k in calls:
            print(f"  {k:36s} host {statistics.median(host[k]):6.1f} us  GPU {statistics.median(gpu[k]):.4f} ms  "
                  f"from an idle GPU {statistics.median(idle[k]):.4f} ms", flush=True)


if __name__ == "__main__":
    main()
