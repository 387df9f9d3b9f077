"""What the library runs for a call: the one place that decides (issue 44). In order:

1. this GPU's per-user overlay (library/overlay.py): what a first-use check or first-use tuning proved here;
2. the packaged pins' exact pin for this GPU (for a call recording gradients its "+train" pin first);
3. a pin of this GPU's family (the same compute capability, or a family the pins file names: kernels/pins.py), used
   only once verified on this GPU: on its first call a short contest (measure/contest.py: the tracker's timing and the
   judge's matches-torch check) runs it against torch on the call's shape; it runs if it matched torch and was faster
   by the promote threshold, else torch runs; either way the outcome goes into the overlay and is not checked again;
4. with tuning on first use turned on (tune_on_first_use, or CONVTUNE_TUNE=1): a bounded contest of torch against the
   library's kernels that take the call (at a family pin, their default and a few neighbours), kept in the overlay;
5. torch.

Never the rule's kernel at its default, nor a pinned neighbour's configuration, for a shape no measurement covers:
on the H200 those ran whole models at 0.72-0.95x torch (issue 44). CONVTUNE_UNPINNED=kernel (kernels/__init__.py)
brings that back for experiments. A kernel that cannot run on this GPU (its compute capability, a refusal by its
plan, shared memory per block) is never chosen: its plan refuses it, and the call runs torch with the reason logged.

A call that records gradients (training) runs a kernel only under a "+train" pin: a plain pin was measured on
forward calls, and what it names runs in training as torch (forward_pins_in_training: why, and the switch
tune_model.py uses while it measures train steps).

Every decision comes with a source string saying which rule decided and why; convert's report prints it, and the
logger `convtune.library.dispatch` says it at DEBUG (the first-use checks at INFO, with their cost).
"""

from __future__ import annotations

import contextlib
import datetime
import logging
import os
import time
from collections.abc import Callable, Iterator
from typing import Any, Optional

from convtune.errors import ConfigError
from convtune.kernels import Choice, choose, get_variant, library_variant, pins
from convtune.library import overlay
from convtune.problem import ConvProblem

log = logging.getLogger(__name__)
TUNE_ENV = "CONVTUNE_TUNE"  # on: tune on first use (tune_on_first_use); read by env_flag
BUDGET_ENV = "CONVTUNE_TUNE_BUDGET_S"  # a first-use contest's time budget per shape, seconds
FAMILY_ENV = "CONVTUNE_FAMILY"  # off: family pins are not checked on first use (torch runs until the tracker pins)
DEFAULT_BUDGET_S = 30.0
# The first-use contests: fewer rounds than promote's 15 (a user's first call waits for it), the same threshold
MIN_GAIN, CONFIDENCE, ROUNDS, REPS = 0.02, 0.95, 7, 10
_tune: Optional[bool] = None  # set by tune_on_first_use; None: the environment decides


def tune_on_first_use(enabled: bool = True) -> None:
    """Turn tuning on first use on or off for this process (as torch.backends.cudnn.benchmark): a call whose shape no
    pin covers then runs a short contest on its first call and keeps the winner in the per-user overlay."""
    global _tune
    _tune = bool(enabled)


TRUE, FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off")


def env_flag(name: str, default: bool) -> bool:
    """A yes/no environment variable, read strictly: 1/true/yes/on or 0/false/no/off (any case; unset or empty: the
    default); anything else is a ConfigError in one line, never a guess (`false` once meant on)."""
    value = os.environ.get(name, "").strip().lower()
    if not value:
        return default
    if value in TRUE or value in FALSE:
        return value in TRUE
    raise ConfigError(name, os.environ[name], f"one of {'/'.join(TRUE)} (on) or {'/'.join(FALSE)} (off)")


def tuning() -> bool:
    return _tune if _tune is not None else env_flag(TUNE_ENV, False)


def budget_s() -> float:
    """CONVTUNE_TUNE_BUDGET_S, seconds a first-use contest may take per shape (ConfigError for anything else)."""
    value = os.environ.get(BUDGET_ENV, "")
    try:
        budget = float(value) if value else DEFAULT_BUDGET_S
    except ValueError:
        budget = -1.0
    if not budget >= 0:
        raise ConfigError(BUDGET_ENV, value, "a number of seconds >= 0 (default 30)")
    return budget


def family_checks() -> bool:
    """Whether a family pin is checked on first use (CONVTUNE_FAMILY: on, the default, or off; env_flag)."""
    return env_flag(FAMILY_ENV, True)


def decide(p: ConvProblem, gpu: str, capability: Optional[tuple[int, int]], precision: str, training: bool,
           device: Any) -> tuple[pins.Pinned, str]:
    """What runs for the call `p` on `gpu` (its compute capability; None: the interpreter), and why in one line.
    A call that records gradients (`training`) runs a kernel only under a "+train" pin (forward_pins_in_training)."""
    home = get_variant(library_variant(p.layout, p.in_channels))
    keys = ([pins.pin_key(p.key(), precision, training=True)] if training else []) + [pins.pin_key(p.key(), precision)]
    data, path = overlay.read(gpu)  # the interpreter's too: promote's own default target on a machine without a GPU
    found = overlay.entry(data, gpu, home.name, keys)
    if found is not None:
        key, entry = found
        how = (entry.get("provenance") or {}).get("rule", "written there by hand")
        value = pins.pinned(entry)
        value = pins.KernelPin(home.name, value) if isinstance(value, pins.Meta) else value
        return _for_training(value, f"overlay {path} / {home.name} / {key} ({how})", key, training)
    c = choose(pins.default_path(), gpu, p, precision, training, capability)
    if c.rule == "kernel":  # CONVTUNE_UNPINNED=kernel: the rule's kernel, as before issue 44, training calls included
        return c.value, c.source
    if c.rule == "family" and _decides(c.key, training):  # a plain one's forward check would not count in training
        return _verify_family(p, gpu, c, precision, home.name, device)
    if c.rule == "torch" and tuning() and capability is not None:
        # the contest times forward calls: its winner is the plain key's, which decides calls without gradients
        value, source = _tune_here(p, gpu, capability, c, precision, home.name, keys[-1], device)
        return _for_training(value, source, keys[-1], training)
    return _for_training(c.value, c.source, c.key, training)


# Whether a call that records gradients may run the kernel of a plain pin (one measured on forward calls). Off: such a
# call runs torch unless a "+train" pin names a kernel. Why: on the H200, two ResNet-50 batch-32 shapes whose kernels
# won their forward contests (nchw_1x1, nchw_igemm) each made SGD train steps 6.6 % and 7.9 % slower (tune_model.py
# train=true, with / without 1.0662 and 1.0791); the train step waits on the host, and a training call of those kernels
# cost ~0.6 ms of host time against torch's ~0.08 (a cProfile of 10 steps: 53 ms in 80 calls). tune_model.py train=true
# turns it on while it times train steps, then writes the "+train" pins that the measurement supports.
_forward_pins_in_training = False
on_rule_change: list[Callable[[], None]] = []  # what drops cached decisions (library/functional registers its own)


@contextlib.contextmanager
def forward_pins_in_training() -> Iterator[None]:
    """Within: a training call falls back to its shape's plain pin where no "+train" pin decides (what tune_model
    measures before it writes "+train" pins). Cached decisions are dropped on entry and exit."""
    global _forward_pins_in_training
    before = _forward_pins_in_training
    _forward_pins_in_training = True
    for forget in on_rule_change:
        forget()
    try:
        yield
    finally:
        _forward_pins_in_training = before
        for forget in on_rule_change:
            forget()


def _decides(key: str, training: bool) -> bool:
    """Whether what the pin `key` names may run for the call: any pin for a call without gradients; a "+train" pin, or
    a plain one within forward_pins_in_training, for a call that records gradients."""
    return not training or key.endswith(pins.TRAIN) or _forward_pins_in_training


def _for_training(value: pins.Pinned, source: str, key: str, training: bool) -> tuple[pins.Pinned, str]:
    """A decision for a call; one that records gradients runs torch where a plain pin (not "+train") named a kernel."""
    if value == pins.TORCH or _decides(key, training):
        return value, source
    return pins.TORCH, (f"torch in training: {source} names {pins.describe(value)} for calls without gradients, and a "
                        f"call that records gradients runs a kernel only under a \"{pins.TRAIN}\" pin (tune_model.py "
                        "train=true measures and writes those)")


def _verify_family(p: ConvProblem, gpu: str, c: Choice, precision: str, section: str,
                   device: Any) -> tuple[pins.Pinned, str]:
    """A family pin's first use on this GPU: its kernel against torch on the call's shape, once; the outcome kept."""
    if c.value == pins.TORCH:  # torch won the key on the family's GPU: torch runs, nothing to check
        return pins.TORCH, c.source
    if not family_checks() or overlay.path_for(gpu) is None:
        return pins.TORCH, (f"{c.source}, not verified on {gpu} ({FAMILY_ENV}=off or {overlay.ENV}=off): torch until "
                            "it is")
    pin = c.value if isinstance(c.value, pins.KernelPin) else pins.KernelPin(section, c.value)
    won, why, cost, numbers = _contest(p, precision, device, [pin], budget_s())
    kept = won if won is not None else pins.TORCH
    verdict = "verified here" if won is not None else "refused here"
    where = overlay.keep(gpu, section, c.key, kept, {
        "rule": f"family pin of {c.family_gpu}, {verdict}", "family_pin": pin.short(), "from_gpu": c.family_gpu,
        "date": _now(), "method": f"first-use contest against torch: {ROUNDS} rounds x {REPS} calls, min gain "
                                  f"{MIN_GAIN}, judged as KernelBench does", "seconds": round(cost, 2), **numbers,
        "reason": why})
    log.info("convtune: %s on %s: %s (%s; %.1f s)%s", c.source, gpu, "runs it" if won else "runs torch", why, cost,
             f"; kept in {where}" if where else "; not kept (no overlay)")
    return kept, f"{c.source}, {verdict} ({why})"


def _tune_here(p: ConvProblem, gpu: str, capability: tuple[int, int], c: Choice, precision: str, section: str,
               key: str, device: Any) -> tuple[pins.Pinned, str]:
    """Tuning on first use: torch against the library's kernels that take the call, within the time budget."""
    candidates = first_use_candidates(p, precision, capability)
    won, why, cost, numbers = _contest(p, precision, device, candidates, budget_s())
    kept = won if won is not None else pins.TORCH
    where = overlay.keep(gpu, section, key, kept, {
        "rule": "tuned on first use", "date": _now(), "candidates": len(candidates), "seconds": round(cost, 2),
        "method": f"first-use contest against torch: {ROUNDS} rounds x {REPS} calls, min gain {MIN_GAIN}, within "
                  f"{budget_s():g} s", **numbers, "reason": why})
    log.info("convtune: tuned %s on first use (%d candidates, %.1f s): %s (%s)%s", key, len(candidates), cost,
             pins.describe(kept), why, f"; kept in {where}" if where else "; not kept (no overlay)")
    return kept, f"tuned on first use on {gpu}: {pins.describe(kept)} ({why})"


def first_use_candidates(p: ConvProblem, precision: str, capability: Optional[tuple[int, int]],
                         limit: int = 8) -> list[pins.KernelPin]:
    """The configurations a first-use contest tries, best guesses first: each library kernel that runs on this GPU
    and takes the call, at its default and at its default's num_stages neighbours (within its Space)."""
    from dataclasses import replace

    from convtune.kernels import LIBRARY_KERNELS, VARIANTS

    first, then = [], []
    for name in LIBRARY_KERNELS:
        v = VARIANTS[name]
        if not v.runs_on(capability) or not v.runs_precision(precision):
            continue
        meta = v.default_meta(p.out_channels, p.stride[1], p.width, precision)
        if v.refuses is not None and v.refuses(p, meta, precision) is not None:
            continue
        first.append(pins.KernelPin(name, meta))
        stages = v.space.neighbours("num_stages", meta.num_stages, (2, 3, 4)) if v.space else tuple(
            s for s in (meta.num_stages - 1, meta.num_stages + 1) if s in (2, 3, 4))
        then += [pins.KernelPin(name, replace(meta, num_stages=s)) for s in stages]
    return (first + then)[:limit]


def _contest(p: ConvProblem, precision: str, device: Any, candidates: list[pins.KernelPin],
             budget: float) -> tuple[Optional[pins.KernelPin], str, float, dict[str, Any]]:
    """Each candidate against torch in turn (interleaved rounds of the two, the tracker's timing, the judge's check),
    until the budget is spent: (the fastest that beat torch by MIN_GAIN, or None; why; seconds; numbers)."""
    import torch

    from convtune.config import TOLERANCE
    from convtune.kernels import VARIANTS
    import convtune.measure.contest as contest

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
            them = [contest.Contender(pins.TORCH, "pin"), contest.Contender(pin.meta, "candidate",
                                                                             kernel=VARIANTS[pin.kernel])]
            contest.remeasure(p, them, precision, TOLERANCE[precision], ROUNDS if on_gpu else 1, REPS if on_gpu else 1,
                              "cuda" if on_gpu else "cpu", check="kernelbench")
            d = contest.decide(them, MIN_GAIN, CONFIDENCE)
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
