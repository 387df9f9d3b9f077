"""Does the tracker's timing measure the kernel or the host? Per case, in one GPU process: the host time one
launch takes to issue; the time the tracker's events loop measured before the GPU spin was added (flush, start
event, call, end event); bench.time_gpu as it is now (flush, a GPU spin covering the host's launch work, start,
call, end); and the kernel's own mean duration from CUPTI (torch.profiler), the L2 flushed before each call;
the three alternated, three times each.

    python benchmarks/probe_launch_gap.py      (GPU)
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "benchmarks"))

from probe_kernels import load_problem

from convtune.kernels import Meta, implicit_gemm, nhwc_igemm
from convtune.measure import bench
from convtune.measure.one_config import make_inputs

CASES = (("resnet50_layer2_3x3", "channels_last", Meta(64, 128, 32, 4, 3)),
         ("alexnet_conv3", "channels_last", Meta(128, 128, 32, 8, 3)),
         ("resnet50_layer1_1x1", "nchw", Meta(128, 64, 32, 4, 3)),
         ("kernelbench_l1_50", "nchw", Meta(128, 128, 16, 4, 6)))
SETTINGS = bench.TimingSettings()  # the tracker's defaults: 5 rounds × 20 calls, L2 flushed


def old_events_loop(fn, flush, s: bench.TimingSettings) -> float:
    """bench.time_gpu's events loop as it was before the spin: flush, start, call, end."""
    samples = []
    for _ in range(s.rounds):
        events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(s.reps)]
        for start, end in events:
            flush()
            start.record()
            fn()
            end.record()
        torch.cuda.synchronize()
        samples += [a.elapsed_time(b) for a, b in events]
    return statistics.median(samples)


def cupti_ms(fn, flush, kernel: str, calls: int = 40) -> float:
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            flush()
            fn()
        torch.cuda.synchronize()
    rows = [e for e in prof.key_averages() if kernel in e.key]
    total = sum(getattr(e, "device_time_total", 0) or getattr(e, "cuda_time_total", 0) for e in rows)
    count = sum(e.count for e in rows)
    return total / count / 1e3 if count else float("nan")  # us → ms, mean per launch


def main() -> None:
    dev = torch.device("cuda")
    flush = bench._L2Flusher(dev)
    print(f"{torch.cuda.get_device_name()} · torch {torch.__version__}; ms unless said; 'old loop' is the events "
          "loop without the spin")
    for name, layout, meta in CASES:
        p = load_problem(name)
        x, w, b = make_inputs(p, 0, dev)
        variant, kernel = (nhwc_igemm, "_conv2d_nhwc_kernel") if layout == "channels_last" else \
            (implicit_gemm, "_conv2d_igemm_kernel")
        if layout == "channels_last":
            x = x.contiguous(memory_format=torch.channels_last)

        def call(variant=variant, x=x, w=w, b=b, p=p, meta=meta):
            return variant.launch(x, w, b, p.stride, p.padding, p.dilation, meta, "tf32")

        for _ in range(3):
            call()
        torch.cuda.synchronize()
        host = statistics.median(bench._host_seconds(call) for _ in range(5)) * 1e3
        olds, news, kerns = [], [], []
        for _ in range(3):  # alternated, so that drift hits all three alike
            olds.append(old_events_loop(call, flush, SETTINGS))
            news.append(bench.time_gpu(call, SETTINGS, dev).median_ms)
            kerns.append(cupti_ms(call, flush, kernel))
        print(f"  {name:<20} {layout:<13} {meta.short():<20} host per launch {host:.4f} · old loop "
              f"{' '.join(f'{v:.4f}' for v in olds)} · time_gpu now {' '.join(f'{v:.4f}' for v in news)} · CUPTI kernel "
              f"mean {' '.join(f'{v:.4f}' for v in kerns)}", flush=True)


if __name__ == "__main__":
    main()
