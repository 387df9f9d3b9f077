"""The head-to-head contest behind a promotion: re-check and re-time contenders interleaved in rounds, and
decide with a bootstrap interval whether the best beats the current pin by at least min_gain.

Interleaving (A B C A B C ...) makes clock or thermal drift hit every contender alike; the statistic is
the per-round speed ratio pin / candidate, so drift common to a round cancels out.

A contender is one of convtune's kernels with one configuration (a promote of `kernel=library` weighs every
kernel the library has), or torch's own convolution at the same precision (pins.TORCH, role "torch"): where torch
wins, the pin says so and the library runs torch for that key.
Against torch, GPU time alone is not enough: a model whose GPU waits on the host (ResNet-50 at batch 32 on the
H200: ~4-6 ms of host enqueue for ~4.8 ms of GPU work) pays each call's host cost in full. Our stem won on GPU
time (0.17 against 0.32 ms) and still made that model 4-8 % slower: its call costs ~190 us of host time there
against ~75 us for cuDNN's. So each contender is also timed from an idle GPU (host cost + GPU time), and
convtune's kernel is pinned over torch only if it wins that way too (decide, _counting_the_host).
"""

from __future__ import annotations

import random
import statistics
from dataclasses import dataclass, field
from typing import Callable, Optional, Union

import torch

from convtune.measure import ab, bench
from convtune.measure.bench import TimingSettings
from convtune.kernels import KernelVariant, Meta, torch_conv
from convtune.pins import TORCH
from convtune.measure.correctness import judge
from convtune.kernels.epilogue import NO_EPILOGUE, Epilogue, as_kwargs, torch_chain
from convtune.measure.one_config import make_epilogue, make_inputs, poisoned_output
from convtune.problem import ConvProblem


@dataclass
class Contender:
    meta: Union[Meta, str]  # a configuration of `kernel`, or TORCH
    role: str  # "pin", "default" or "unpinned" (no pin yet: the kernel's default, or torch), "candidate" or "torch"
    run_id: Optional[str] = None
    logged_ms: Optional[float] = None
    rel_err: Optional[float] = None
    correct: Optional[bool] = None
    rounds_ms: list[float] = field(default_factory=list)
    idle_ms: list[float] = field(default_factory=list)  # per round: one call from an idle GPU, host cost included
    kernel: Optional[KernelVariant] = None  # the kernel `meta` configures (None for TORCH)
    error: Optional[str] = None  # why it failed (remeasure): its launch's error, or the check's verdict, in one line
    launched: Optional[bool] = None  # False: its launch raised (it cannot run here: shared memory, say)
    chain: tuple[str, ...] = ()  # the problem's epilogue (remeasure sets it): torch runs it after its convolution

    @property
    def median_ms(self) -> Optional[float]:
        return statistics.median(self.rounds_ms) if self.rounds_ms else self.logged_ms

    @property
    def label(self) -> str:
        if self.meta == TORCH:
            return "torch.nn.functional.conv2d (cuDNN on a GPU)" + (f", then {', '.join(self.chain)} in torch"
                                                                     if self.chain else "")
        return f"{self.kernel.name + ': ' if self.kernel else ''}{self.meta.label()}"  # type: ignore[union-attr]


@dataclass
class Decision:
    promote: bool
    reason: str
    winner: Optional[Contender]
    gain: Optional[float] = None  # median speed ratio − 1
    ratio_lo: Optional[float] = None
    ratio_hi: Optional[float] = None


def remeasure(p: ConvProblem, contenders: list[Contender], precision: str, tol: float,
              rounds: int, reps: int, device: str, seed: int = 1, check: str = "kernelbench") -> None:
    """Check every contender on fresh inputs (poisoned output, convtune.measure.correctness.judge by `check`), then
    time the correct ones in interleaved rounds. Fills rel_err, correct and rounds_ms in place. Each kernel
    contender runs its own kernel on the problem's inputs, in the problem's layout: a copy into the layout the
    kernel reads is inside its timing, as in the library's call.

    torch runs at its best: cudnn.benchmark on (its algorithm search happens in the checked first call), so a
    pin says torch unless our kernel beats the fastest algorithm cuDNN has for the shape."""
    dev = torch.device("cuda" if device == "cuda" else "cpu")
    x, w, b = make_inputs(p, seed, dev)
    ep = make_epilogue(p, seed, dev)
    calls: list[tuple[Contender, Callable[[], object]]] = []
    saved_benchmark = torch.backends.cudnn.benchmark
    torch.backends.cudnn.benchmark = True
    try:
        for c in contenders:
            c.chain = tuple(p.epilogue)
            out = poisoned_output(p, dev)  # in the problem's layout, as the measured runs wrote it
            try:
                call = _call_of(c, p, x, w, b, precision, out, ep)
                result = call()
                out = result if c.meta == TORCH else out  # the kernel wrote into the poisoned `out`
                verdict = judge(out, p, x, w, b, precision, tol, check, ep)  # type: ignore[arg-type]
                c.rel_err, c.correct = verdict.metrics.get("rel_err"), verdict.ok
                if not verdict.ok:
                    c.error = verdict.message.splitlines()[0][:200] if verdict.message else "fails the check"
                    if c.meta == TORCH and dev.type != "cuda":
                        c.error = ("on the CPU torch's convolution is fp32, and the check's reference is cuDNN's TF32 "
                                   "rule (emulated): torch is the judge's reference only on a GPU")
            except Exception as e:  # noqa: BLE001 - a contender that no longer runs (or cannot here) simply loses
                c.correct, c.launched = False, False
                c.error = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:300]
            if c.correct:
                calls.append((c, call))
        one_round = TimingSettings(rounds=1, reps=reps, warmup=1 if dev.type == "cuda" else 0)
        # each contender runs after each other alike (measure/ab.balanced_orders): in one fixed order the pin ran
        # right after torch in every round
        orders = ab.balanced_orders(len(calls))
        for r in range(rounds):
            for i in orders[r % len(orders)]:
                c, call = calls[i]
                t = bench.time_gpu(call, one_round, dev) if dev.type == "cuda" else bench.time_host(call, one_round)
                c.rounds_ms.append(t.median_ms)
                if dev.type == "cuda":
                    c.idle_ms.append(_from_idle_gpu_ms(call, dev))
    finally:
        torch.backends.cudnn.benchmark = saved_benchmark


def _call_of(c: Contender, p: ConvProblem, x: torch.Tensor, w: torch.Tensor, b: Optional[torch.Tensor], precision: str,
             out: torch.Tensor, ep: Epilogue = NO_EPILOGUE) -> Callable[[], object]:
    """The call a contender is checked and timed with: torch's convolution; or the kernel as the library calls it
    once a signature has its plan (the variant's `prepared`: checks and plan once, per call only the layout copy and
    the launch), so that timing from an idle GPU counts the host work of the library's call and not the first
    call's. Before that, the contest timed each kernel's full `launch` (checks and plan every call): on the H200
    that lost three NCHW keys to torch that our kernel won on GPU time (alexnet_conv3 0.512 against 0.379 ms from
    an idle GPU, 0.315 against 0.340 on GPU time). A variant
    without `prepared` (seed) is timed through `launch`. A fused problem's torch runs its epilogue op after op."""
    if c.meta == TORCH:
        if ep.chain:
            return lambda: torch_chain(torch_conv.conv2d(x, w, b, p.stride, p.padding, p.dilation, precision), ep)
        return lambda: torch_conv.conv2d(x, w, b, p.stride, p.padding, p.dilation, precision)
    k, fused = c.kernel, as_kwargs(ep)
    if k.prepared is not None:  # type: ignore[union-attr]
        return k.prepared(x, w, b, p.stride, p.padding, p.dilation, c.meta, precision, out=out,  # type: ignore[union-attr]
                          **fused)
    return lambda: k.launch(x, w, b, p.stride, p.padding, p.dilation, c.meta, precision, out=out,  # type: ignore[union-attr]
                            **fused)


def _from_idle_gpu_ms(call: Callable[[], object], dev: torch.device) -> float:
    """One call with nothing queued before it: the events then span the host's work on the call, while the GPU
    waits, and the GPU's (the L2 is warm from the round before: the host cost is what this adds)."""
    torch.cuda.synchronize(dev)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    call()
    end.record()
    torch.cuda.synchronize(dev)
    return start.elapsed_time(end)


def bootstrap_ratio(pin_ms: list[float], cand_ms: list[float], confidence: float, resamples: int = 4000,
                    seed: int = 0) -> tuple[float, float, float]:
    """(median, lower, upper) of the per-round ratio pin/candidate; the bounds are the one-sided
    `confidence` quantiles of the bootstrapped median (lower = 5th percentile at 0.95)."""
    ratios = [a / b for a, b in zip(pin_ms, cand_ms)]
    rng = random.Random(seed)
    boots = sorted(statistics.median(rng.choices(ratios, k=len(ratios))) for _ in range(resamples))
    lo = boots[int((1 - confidence) * (resamples - 1))]
    hi = boots[int(confidence * (resamples - 1))]
    return statistics.median(ratios), lo, hi


# the roles of the contender that holds the key now: its pin; with no pin, the kernel's default (promote.torch=false)
# or torch, which the library runs for a key with no pin (library/dispatch.py)
HOLDERS = ("pin", "default", "unpinned")


def _holder(c: Contender) -> str:
    return "holder, torch (no pin)," if c.role == "unpinned" else c.role


def decide(contenders: list[Contender], min_gain: float, confidence: float) -> Decision:
    """Promote the fastest correct contender only if it beats the current pin (or default) by min_gain with
    the bootstrap's lower bound; with logged numbers only (no rounds), the point estimate must clear it. Where
    torch contends and was timed from an idle GPU too, convtune's kernel runs only if it wins that way as well
    (_counting_the_host); a kernel that wins torch's key on GPU time alone makes way for the next fastest."""
    pin = next(c for c in contenders if c.role in HOLDERS)
    passed_over: list[Contender] = []  # kernels that beat torch's key on GPU time but not from an idle GPU
    first: Optional[Decision] = None
    while True:
        on_gpu = _on_gpu_time([c for c in contenders if all(c is not p for p in passed_over)], min_gain, confidence)
        d = _counting_the_host(on_gpu, contenders, pin, min_gain)
        if d.promote or not on_gpu.promote:
            break
        # the next fastest kernel contends in its place: kernels within a few percent of each other on GPU time
        # differ in host cost (AlexNet's features.8 at batch 256 on the H200: nhwc_streamk, two launches a call,
        # 0.2705 ms on GPU time and 0.3577 from an idle GPU; nhwc_preround 0.2784 and 0.3523)
        passed_over.append(on_gpu.winner)  # type: ignore[arg-type]
        first = first or d
    if first is None:
        return d
    if d.promote:
        d.reason += f" ({', '.join(c.label for c in passed_over)}: faster on GPU time, not from an idle GPU)"
        return d
    return first


def _counting_the_host(d: Decision, contenders: list[Contender], pin: Contender, min_gain: float) -> Decision:
    """Whoever holds the key keeps it unless beaten by min_gain, here as on GPU time: torch replaces a kernel
    that is slower from an idle GPU by min_gain, and a kernel replaces torch only if faster that way by min_gain."""
    torch_c = next((c for c in contenders if c.meta == TORCH and c.correct is not False and c.idle_ms), None)
    runner = d.winner if d.promote else pin
    if torch_c is None or runner is None or runner.meta == TORCH or not runner.idle_ms or runner.correct is False:
        return d
    t, r = statistics.median(torch_c.idle_ms), statistics.median(runner.idle_ms)
    idle = f"from an idle GPU (host cost counted): torch {t:.4f} ms, {runner.label} {r:.4f} ms"
    if pin is torch_c and r * (1 + min_gain) > t:  # the kernel beat the torch pin on GPU time only
        return Decision(False, f"torch stays ({'no pin' if pin.role == 'unpinned' else 'the pin'}): the kernel is not {100 * min_gain:.0f} % faster "
                               f"{idle}", pin, 0.0)
    if pin is not torch_c and r >= t * (1 + min_gain):
        return Decision(True, f"torch is {100 * (r / t - 1):.1f} % faster {idle}; on GPU time alone: {d.reason}",
                        torch_c, r / t - 1, r / t, r / t)
    return d


def _on_gpu_time(contenders: list[Contender], min_gain: float, confidence: float) -> Decision:
    pin = next(c for c in contenders if c.role in HOLDERS)
    alive = [c for c in contenders if c.correct is not False and c.median_ms is not None]
    if not alive:
        return Decision(False, "no correct contender could be timed", None)
    best = min(alive, key=lambda c: c.median_ms)  # type: ignore[arg-type, return-value]
    if best is pin:
        return Decision(False, f"the current {_holder(pin)} is the fastest contender", pin, 0.0)
    if pin.correct is False:
        return Decision(True, f"the current {_holder(pin)} fails the correctness check", best)
    if pin.median_ms is None:
        return Decision(False, f"the current {_holder(pin)} has no measurement: re-measure on its GPU", None)
    if pin.rounds_ms and best.rounds_ms:
        ratio, lo, hi = bootstrap_ratio(pin.rounds_ms, best.rounds_ms, confidence)
    else:
        ratio = lo = hi = pin.median_ms / best.median_ms  # type: ignore[operator]
    gain = ratio - 1
    d = Decision(False, "", best, gain, lo, hi)
    if gain < min_gain:
        d.reason = f"gain {100 * gain:.1f} % < {100 * min_gain:.0f} %"
    elif lo < 1 + min_gain:
        d.reason = (f"unstable: the {100 * confidence:.0f} % lower bound of the speed ratio, {lo:.3f}, is under "
                    f"{1 + min_gain:.2f} (interval {lo:.3f}–{hi:.3f})")
    else:
        d.promote = True
        d.reason = f"gain {100 * gain:.1f} % >= {100 * min_gain:.0f} % (lower bound {lo:.3f})"
    return d


def _cell(v: Optional[float], spec: str) -> str:
    return "" if v is None else format(v, spec)


def table(contenders: list[Contender], decision: Decision) -> str:
    rows = ["| role | config | logged ms | re-measured ms | rounds | from idle GPU ms | rel_err | correct | run |",
            "|---|---|---|---|---|---|---|---|---|"]
    for c in sorted(contenders, key=lambda c: (c.median_ms is None, c.median_ms or 0.0)):
        role = c.role + (" (winner)" if decision.promote and decision.winner is c else "")
        remeasured = statistics.median(c.rounds_ms) if c.rounds_ms else None
        correct = "—" if c.correct is None else ("yes" if c.correct else f"NO: {c.error or 'fails the check'}")
        idle = statistics.median(c.idle_ms) if c.idle_ms else None
        rows.append(f"| {role} | {c.label} | {_cell(c.logged_ms, '.4f')} | {_cell(remeasured, '.4f')} | "
                    f"{len(c.rounds_ms)} | {_cell(idle, '.4f')} | {_cell(c.rel_err, '.1e')} | {correct} | {c.run_id or ''} |")
    return "\n".join(rows) + f"\n\ndecision: {'PROMOTE' if decision.promote else 'KEEP'}: {decision.reason}"
