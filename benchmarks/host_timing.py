"""Host time of a call with an idle GPU: the benchmarks/probe_host_cost*.py probes' one measure."""

import statistics
import time

import torch


def host_us(f, n=300):
    """Median microseconds for `f()` to return, the GPU synchronised (idle) before each call."""
    for _ in range(20):
        f()
    torch.cuda.synchronize()
    got = []
    for _ in range(n):
        t0 = time.perf_counter()
        f()
        got.append(time.perf_counter() - t0)
        torch.cuda.synchronize()
    return 1e6 * statistics.median(got)
