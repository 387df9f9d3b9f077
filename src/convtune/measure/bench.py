"""Time and check callables. Never names a kernel: whatever is passed in is what gets measured.

Timing method (GPU, mode=events): `warmup` untimed calls, then `rounds` rounds of `reps` calls; before each
call the GPU spins for twice the host time one call takes to issue, the L2 is flushed by writing a buffer of 4×
its size, and CUDA events bracket the call alone. The spin keeps the host ahead of the GPU: without it a
launcher slower than the flush left the GPU idle inside the timed span, and on the H200 resnet50_layer2_3x3's
0.062 ms kernel (CUPTI) behind 0.09–0.13 ms of Python launch work measured 0.065–0.230 ms from one repeat to the
next; with it 0.0647–0.0649, while kernels longer than the launch work read 0.5–1.6 % higher than without it. The
median over all samples is the latency; p20/p80 show the spread of single calls, and `cv` is the
coefficient of variation of the per-round medians, i.e. how well the median itself repeats.
mode=graph captures `reps` back-to-back calls in one CUDA graph and times each round's replay: no launch
gaps, and no L2 flush between calls (so it measures a warm L2 for inputs smaller than the cache).
Without a GPU (the Triton interpreter) the same loop runs on the host clock; those numbers say nothing
about GPU speed and are tagged `interpreter` by the caller.
"""

from __future__ import annotations

import math
import statistics
import time
from dataclasses import dataclass
from typing import Callable, Optional, TypeVar

import torch

from convtune.errors import ConfigError

T = TypeVar("T")


@dataclass(frozen=True)
class TimingSettings:
    mode: str = "events"  # events | graph
    rounds: int = 5
    reps: int = 20
    warmup: int = 3
    flush_l2: bool = True


@dataclass(frozen=True)
class Timing:
    samples_ms: tuple[float, ...]
    round_medians_ms: tuple[float, ...]

    @property
    def median_ms(self) -> float:
        return statistics.median(self.samples_ms)

    def quantile_ms(self, q: float) -> float:
        s = sorted(self.samples_ms)
        pos = q * (len(s) - 1)  # linear interpolation between closest ranks
        lo, hi = math.floor(pos), math.ceil(pos)
        return s[lo] + (s[hi] - s[lo]) * (pos - lo)

    @property
    def cv(self) -> float:
        r = self.round_medians_ms
        return statistics.pstdev(r) / statistics.fmean(r) if len(r) > 1 else 0.0

    def metrics(self, prefix: str = "latency") -> dict[str, float]:
        return {f"{prefix}_ms": self.median_ms, f"{prefix}_p20_ms": self.quantile_ms(0.2),
                f"{prefix}_p80_ms": self.quantile_ms(0.8), f"{prefix}_cv": self.cv}


def _check_settings(s: TimingSettings) -> None:
    checks = (("mode", s.mode in ("events", "graph"), "'events' or 'graph'"), ("rounds", s.rounds >= 1, "an integer >= 1"),
              ("reps", s.reps >= 1, "an integer >= 1"), ("warmup", s.warmup >= 0, "an integer >= 0"))
    for key, ok, allowed in checks:
        if not ok:
            raise ConfigError(f"bench.{key}", getattr(s, key), allowed)


class _L2Flusher:
    """Writes a buffer 4× the L2 size (at least 256 MB) so the next call starts with a cold cache."""

    def __init__(self, device: torch.device) -> None:
        l2 = getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 0) or 64 * 2**20
        self.buf = torch.empty(max(4 * l2, 256 * 2**20) // 4, dtype=torch.int32, device=device)

    def __call__(self) -> None:
        self.buf.zero_()


_flushers: dict[torch.device, _L2Flusher] = {}


def time_gpu(fn: Callable[[], object], s: TimingSettings, device: torch.device) -> Timing:
    _check_settings(s)
    for _ in range(s.warmup):
        fn()
    torch.cuda.synchronize(device)
    if s.mode == "graph":
        return _time_graph(fn, s, device)
    flush = _flushers.setdefault(device, _L2Flusher(device)) if s.flush_l2 else None
    cover = _spin_cycles(device, 2 * _host_seconds(fn) + 20e-6)
    samples: list[float] = []
    medians: list[float] = []
    for _ in range(s.rounds):
        events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(s.reps)]
        for start, end in events:
            torch.cuda._sleep(cover)  # the GPU waits out the host's launch work, so the start event fires right
            if flush is not None:     # before the call's own kernels, not while the host is still preparing them
                flush()
            start.record()
            fn()
            end.record()
        torch.cuda.synchronize(device)
        round_ms = [start.elapsed_time(end) for start, end in events]
        samples += round_ms
        medians.append(statistics.median(round_ms))
    return Timing(tuple(samples), tuple(medians))


def _host_seconds(fn: Callable[[], object], calls: int = 3) -> float:
    """The host time one call of `fn` takes to issue its work (median of `calls`, no synchronize)."""
    spent = []
    for _ in range(calls):
        t0 = time.perf_counter()
        fn()
        spent.append(time.perf_counter() - t0)
    return statistics.median(spent)


_cycles_per_second: dict[torch.device, float] = {}


def _spin_cycles(device: torch.device, seconds: float) -> int:
    """How many cycles torch.cuda._sleep spins to keep `device` busy for `seconds` (calibrated once)."""
    rate = _cycles_per_second.get(device)
    if rate is None:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        torch.cuda._sleep(10_000_000)
        end.record()
        torch.cuda.synchronize(device)
        rate = _cycles_per_second[device] = 10_000_000 / (start.elapsed_time(end) / 1e3)
    return int(rate * seconds)


def _time_graph(fn: Callable[[], object], s: TimingSettings, device: torch.device) -> Timing:
    stream = torch.cuda.Stream(device)
    stream.wait_stream(torch.cuda.current_stream(device))
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.stream(stream):
        with torch.cuda.graph(graph, stream=stream):
            for _ in range(s.reps):
                fn()
    torch.cuda.current_stream(device).wait_stream(stream)
    graph.replay()  # one untimed replay: first replay uploads the graph
    torch.cuda.synchronize(device)
    per_call: list[float] = []
    for _ in range(s.rounds):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        torch.cuda.synchronize(device)
        per_call.append(start.elapsed_time(end) / s.reps)
    return Timing(tuple(per_call), tuple(per_call))


def time_host(fn: Callable[[], object], s: TimingSettings) -> Timing:
    """Wall-clock timing for code that runs on the host (the Triton interpreter)."""
    _check_settings(s)
    for _ in range(s.warmup):
        fn()
    samples: list[float] = []
    medians: list[float] = []
    for _ in range(s.rounds):
        round_ms = []
        for _ in range(s.reps):
            t0 = time.perf_counter()
            fn()
            round_ms.append((time.perf_counter() - t0) * 1e3)
        samples += round_ms
        medians.append(statistics.median(round_ms))
    return Timing(tuple(samples), tuple(medians))


def first_call(fn: Callable[[], T], device: Optional[torch.device]) -> tuple[float, T]:
    """(wall seconds, result) of one synchronised call: for a fresh kernel, compile (or cache load) + run."""
    t0 = time.perf_counter()
    result = fn()
    if device is not None and device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter() - t0, result


@dataclass(frozen=True)
class Check:
    ok: bool
    rel_err: float
    unwritten: int
    message: str


def check_output(out: torch.Tensor, ref: torch.Tensor, tol: float) -> Check:
    """Compare an output that was poisoned with NaN before the launch against a float64 reference.

    NaN left in the output means elements were never written; otherwise the relative L2 error
    ‖out − ref‖ / ‖ref‖ must be within `tol`.
    """
    if out.shape != ref.shape:
        return Check(False, math.nan, out.numel(), f"output shape {tuple(out.shape)} != reference {tuple(ref.shape)}")
    bad = int((~torch.isfinite(out)).sum())
    if bad:
        return Check(False, math.nan, bad, f"{bad} of {out.numel()} output elements not written (still NaN) or not finite")
    diff = out.to(torch.float64) - ref
    rel = float(torch.linalg.vector_norm(diff) / torch.linalg.vector_norm(ref).clamp_min(1e-300))
    if not rel <= tol:
        return Check(False, rel, 0, f"relative L2 error {rel:.3g} > tolerance {tol:.0e}")
    return Check(True, rel, 0, f"relative L2 error {rel:.3g} <= {tol:.0e}")
