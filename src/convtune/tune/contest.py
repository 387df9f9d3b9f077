"""The head-to-head contest behind a promotion: re-check and re-time contenders interleaved in rounds, and
decide with a bootstrap interval whether the best beats the current pin by at least min_gain.

Interleaving (A B C A B C ...) makes clock or thermal drift hit every contender alike; the statistic is
the per-round speed ratio pin / candidate, so drift common to a round cancels out.
"""

from __future__ import annotations

import random
import statistics
from dataclasses import dataclass, field
from typing import Callable, Optional

import torch

from convtune.measure import bench
from convtune.measure.bench import TimingSettings
from convtune.kernels import KernelVariant, Meta
from convtune.measure.correctness import judge
from convtune.measure.one_config import make_inputs
from convtune.problem import ConvProblem


@dataclass
class Contender:
    meta: Meta
    role: str  # "pin", "default" (no pin yet) or "candidate"
    run_id: Optional[str] = None
    logged_ms: Optional[float] = None
    rel_err: Optional[float] = None
    correct: Optional[bool] = None
    rounds_ms: list[float] = field(default_factory=list)

    @property
    def median_ms(self) -> Optional[float]:
        return statistics.median(self.rounds_ms) if self.rounds_ms else self.logged_ms


@dataclass
class Decision:
    promote: bool
    reason: str
    winner: Optional[Contender]
    gain: Optional[float] = None  # median speed ratio − 1
    ratio_lo: Optional[float] = None
    ratio_hi: Optional[float] = None


def remeasure(p: ConvProblem, variant: KernelVariant, contenders: list[Contender], precision: str, tol: float,
              rounds: int, reps: int, device: str, seed: int = 1, check: str = "kernelbench") -> None:
    """Check every contender on fresh inputs (poisoned output, convtune.measure.correctness.judge by `check`), then
    time the correct ones in interleaved rounds. Fills rel_err, correct and rounds_ms in place."""
    dev = torch.device("cuda" if device == "cuda" else "cpu")
    x, w, b = make_inputs(p, seed, dev)
    calls: list[tuple[Contender, Callable[[], object]]] = []
    for c in contenders:
        out = torch.full(p.output_shape, float("nan"), device=dev)
        call = (lambda m, o: lambda: variant.launch(x, w, b, p.stride, p.padding, p.dilation, m, precision, out=o))(c.meta, out)
        try:
            call()
            verdict = judge(out, p, x, w, b, precision, tol, check)
            c.rel_err, c.correct = verdict.metrics.get("rel_err"), verdict.ok
        except Exception:  # noqa: BLE001 - a contender that no longer runs simply loses
            c.correct = False
        if c.correct:
            calls.append((c, call))
    one_round = TimingSettings(rounds=1, reps=reps, warmup=1 if dev.type == "cuda" else 0)
    for _ in range(rounds):
        for c, call in calls:
            t = bench.time_gpu(call, one_round, dev) if dev.type == "cuda" else bench.time_host(call, one_round)
            c.rounds_ms.append(t.median_ms)


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


def decide(contenders: list[Contender], min_gain: float, confidence: float) -> Decision:
    """Promote the fastest correct contender only if it beats the current pin (or default) by min_gain with
    the bootstrap's lower bound; with logged numbers only (no rounds), the point estimate must clear it."""
    pin = next(c for c in contenders if c.role in ("pin", "default"))
    alive = [c for c in contenders if c.correct is not False and c.median_ms is not None]
    if not alive:
        return Decision(False, "no correct contender could be timed", None)
    best = min(alive, key=lambda c: c.median_ms)  # type: ignore[arg-type, return-value]
    if best is pin:
        return Decision(False, f"the current {pin.role} is the fastest contender", pin, 0.0)
    if pin.correct is False:
        return Decision(True, f"the current {pin.role} is no longer correct", best)
    if pin.median_ms is None:
        return Decision(False, f"the current {pin.role} has no measurement: re-measure on its GPU", None)
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
    rows = ["| role | config | logged ms | re-measured ms | rounds | rel_err | correct | run |",
            "|---|---|---|---|---|---|---|---|"]
    for c in sorted(contenders, key=lambda c: (c.median_ms is None, c.median_ms or 0.0)):
        role = c.role + (" (winner)" if decision.promote and decision.winner is c else "")
        remeasured = statistics.median(c.rounds_ms) if c.rounds_ms else None
        correct = "" if c.correct is None else ("yes" if c.correct else "NO")
        rows.append(f"| {role} | {c.meta.label()} | {_cell(c.logged_ms, '.4f')} | {_cell(remeasured, '.4f')} | "
                    f"{len(c.rounds_ms)} | {_cell(c.rel_err, '.1e')} | {correct} | {c.run_id or ''} |")
    return "\n".join(rows) + f"\n\ndecision: {'PROMOTE' if decision.promote else 'KEEP'}: {decision.reason}"
