"""The library's first-use contests (library/dispatch.py decides when one runs, and keeps the outcome): a family pin
verified on this GPU, and tuning on first use. Each runs the candidates against torch on the call's shape with the
tracker's timing and the judge's check (measure/contest.py) and returns an Outcome: what runs, why, and the provenance
dispatch writes into this GPU's per-user overlay (pins/overlay.py), so that every later call of the key follows it.
"""

from __future__ import annotations

import contextlib
import datetime
import time
from dataclasses import dataclass, replace
from typing import Any, Optional

from convtune import pins
from convtune.kernels import LIBRARY_KERNELS, VARIANTS, default_meta
from convtune.problem import ConvProblem

# The first-use contests: fewer rounds than promote's 15 (a user's first call waits for it), the same threshold
MIN_GAIN, CONFIDENCE, ROUNDS, REPS = 0.02, 0.95, 7, 10


@dataclass(frozen=True)
class Outcome:
    """A first-use contest's verdict: what runs (`kept`), the decision's source line, the provenance to keep in the
    overlay, and the line logged at INFO (with its cost)."""

    kept: pins.Pinned
    why: str
    provenance: dict[str, Any]
    message: str


def verify_family(p: ConvProblem, gpu: str, pin: pins.KernelPin, family_gpu: str, source: str, precision: str,
                  device: Any, budget: float) -> Outcome:
    """A family pin's first use on this GPU: its kernel against torch on the call's shape, once."""
    won, why, cost, numbers = contest(p, precision, device, [pin], budget)
    kept = won if won is not None else pins.TORCH
    verdict = "verified here" if won is not None else "refused here"
    provenance = {
        "rule": f"family pin of {family_gpu}, {verdict}", "family_pin": pin.short(), "from_gpu": family_gpu,
        "date": _now(), "method": f"first-use contest against torch: {ROUNDS} rounds x {REPS} calls, min gain "
                                  f"{MIN_GAIN}, judged as KernelBench does", "seconds": round(cost, 2), **numbers,
        "reason": why}
    message = f"{source} on {gpu}: {'runs it' if won else 'runs torch'} ({why}; {cost:.1f} s)"
    return Outcome(kept, f"{source}, {verdict} ({why})", provenance, message)


def tune(p: ConvProblem, gpu: str, capability: tuple[int, int], key: str, precision: str, device: Any,
         budget: float) -> Outcome:
    """Tuning on first use: torch against the library's kernels that take the call, within the time budget."""
    found = candidates(p, precision, capability)
    won, why, cost, numbers = contest(p, precision, device, found, budget)
    kept = won if won is not None else pins.TORCH
    provenance = {
        "rule": "tuned on first use", "date": _now(), "candidates": len(found), "seconds": round(cost, 2),
        "method": f"first-use contest against torch: {ROUNDS} rounds x {REPS} calls, min gain {MIN_GAIN}, within "
                  f"{budget:g} s", **numbers, "reason": why}
    message = (f"tuned {key} on first use ({len(found)} candidates, {cost:.1f} s): {pins.describe(kept)} ({why}); "
               f"decided for eager calls on this call alone: tune_model.py decides in the model (compile=true for "
               f"torch.compile)")
    return Outcome(kept, f"tuned on first use on {gpu}: {pins.describe(kept)} ({why})", provenance, message)


def candidates(p: ConvProblem, precision: str, capability: Optional[tuple[int, int]],
               limit: int = 8) -> list[pins.KernelPin]:
    """The configurations a first-use contest tries, best guesses first: each library kernel that runs on this GPU
    and takes the call (its shape, precision, dtype and epilogue), at its default and at its default's num_stages neighbours
    (within its Space)."""
    first, then = [], []
    for name in LIBRARY_KERNELS:
        v = VARIANTS[name]
        if not v.runs_on(capability) or not v.runs_precision(precision) or not v.takes_dtype(p.dtype) or \
                not v.fuses(p.epilogue):
            continue
        meta = default_meta(v, p, precision)
        if v.refuses is not None and v.refuses(p, meta, precision) is not None:
            continue
        first.append(pins.KernelPin(name, meta))
        stages = v.space.neighbours("num_stages", meta.num_stages, (2, 3, 4)) if v.space else tuple(
            s for s in (meta.num_stages - 1, meta.num_stages + 1) if s in (2, 3, 4))
        then += [pins.KernelPin(name, replace(meta, num_stages=s)) for s in stages]
    return (first + then)[:limit]


def contest(p: ConvProblem, precision: str, device: Any, candidates: list[pins.KernelPin],
            budget: float) -> tuple[Optional[pins.KernelPin], str, float, dict[str, Any]]:
    """Each candidate against torch in turn (interleaved rounds of the two, the tracker's timing, the judge's check),
    until the budget is spent: (the fastest that beat torch by MIN_GAIN, or None; why; seconds; numbers)."""
    import torch

    from convtune.config import tolerance
    import convtune.measure.contest as measured

    start = time.monotonic()
    best: Optional[tuple[float, pins.KernelPin, Any]] = None
    tried, lines = 0, []
    on_gpu = torch.device(device).type == "cuda"  # else the interpreter's CPU host times (tests of this path)
    with torch.cuda.device(device) if on_gpu else contextlib.nullcontext():
        for pin in candidates:
            if tried and time.monotonic() - start > budget:
                lines.append(f"budget of {budget:g} s spent after {tried} of {len(candidates)}")
                break
            tried += 1
            them = [measured.Contender(pins.TORCH, "pin"), measured.Contender(pin.meta, "candidate",
                                                                              kernel=VARIANTS[pin.kernel])]
            measured.remeasure(p, them, precision, tolerance(precision, p.dtype), ROUNDS if on_gpu else 1,
                               REPS if on_gpu else 1, "cuda" if on_gpu else "cpu", check="kernelbench")
            d = measured.decide(them, MIN_GAIN, CONFIDENCE)
            torch_ms, ours = them[0].median_ms, them[1]
            if ours.launched is False:  # on this GPU it cannot run (shared memory per block, say)
                lines.append(f"{pin.short()}: cannot run here ({ours.error})")
                continue
            if ours.correct is False:
                lines.append(f"{pin.short()}: fails the judge's check (rel_err {ours.rel_err})")
                continue
            ratio = (torch_ms / ours.median_ms) if torch_ms and ours.median_ms else None
            lines.append(f"{pin.short()}: {ours.median_ms:.4f} ms against torch {torch_ms:.4f} ms" if ratio else
                         f"{pin.short()}: not timed")
            if d.promote and d.winner is ours and ratio and (best is None or ratio > best[0]):
                best = (ratio, pin, ours)
    cost = time.monotonic() - start
    if best is None:
        return None, "; ".join(lines) or "no candidate", cost, {}
    ratio, pin, ours = best
    return pin, f"{pin.short()} {ratio:.3f}x torch", cost, {"speedup_vs_torch": round(ratio, 4),
                                                             "rel_err": ours.rel_err, "tried": "; ".join(lines)}


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
