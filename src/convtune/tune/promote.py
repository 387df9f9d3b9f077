"""`python promote.py`: pin the true winner for a problem, or keep the current pin and say why.

Candidates are FINISHED, correct (`status=ok`) runs for the same problem key, kernel variant, kernel source
hash, precision and device name; the current pin (or the kernel's default) is always in the contest.
The top-k candidates and the pin are re-checked and re-timed head to head (convtune.tune.contest); only a gain
of at least promote.min_gain whose bootstrap lower bound also clears it is written, with its provenance.
"""

from __future__ import annotations

import datetime
import difflib
from typing import Optional

from omegaconf import DictConfig

from convtune.config import TOLERANCE
from convtune.errors import ConfigError
from convtune.setup import git_tags, resolve
from convtune.record import Identity, Metric, Param, RunView, Tag
from convtune.track.store import Tracker


def candidate_runs(tracker: Tracker, identity: Identity) -> list[RunView]:
    return [RunView(r) for r in tracker.search(identity.candidates_filter())]


def validate(p: DictConfig) -> None:
    """promote.* values, each checked with a message naming the key, the value and what is allowed."""
    checks = (("top_k", p.top_k >= 1, "an integer >= 1"), ("rounds", p.rounds >= 2, "an integer >= 2 (the bootstrap needs rounds)"),
              ("reps", p.reps >= 1, "an integer >= 1"), ("min_gain", p.min_gain >= 0, "a fraction >= 0 (0.02 = 2 %)"),
              ("confidence", 0.5 <= p.confidence < 1, "a probability in [0.5, 1)"))
    for key, ok, allowed in checks:
        if not ok:
            raise ConfigError(f"promote.{key}", p[key], allowed)


def run_promote(cfg: DictConfig) -> int:
    """Returns the process exit status: 0 for a decision (promoted or kept), 1 for a refusal."""
    validate(cfg.promote)
    setup = resolve(cfg)
    if setup.notice:
        print(setup.notice)
    setup.raise_error()
    from convtune.kernels import Meta, pins  # only after resolve: the device decides how kernels load
    from convtune.tune import contest

    here = setup.device_tags
    gpu = cfg.promote.device_name or setup.gpu
    problem, variant, precision, path = setup.problem, setup.variant, setup.precision, setup.pins_path
    identity = setup.identity(gpu)
    key = setup.pin_key()
    # The contest is against this key's own pin (or the default), not the nearest pinned shape the library
    # would fall back on: a pin is written for this key only.
    current = pins.entries(pins.load(path), gpu, variant.name).get(key)
    pin_meta = Meta(**current["meta"]) if current else variant.default_meta(
        problem.out_channels, problem.stride[1], problem.width, precision)
    tracker = Tracker(setup.tracking_uri)

    runs = candidate_runs(tracker, identity)
    stale = [r for r in runs if identity.is_stale(r)]
    if stale and not cfg.promote.allow_stale:
        print(f"ignoring {len(stale)} run(s) made with an older kernel source (promote.allow_stale=true admits them)")
        runs = [r for r in runs if r not in stale]
    elif stale:
        print(f"promote.allow_stale=true: {len(stale)} run(s) of an older kernel source are candidates")
    best_by_meta: dict[Meta, RunView] = {}
    for r in runs:
        m = Meta(**r.meta)
        if m not in best_by_meta or r.latency_ms < best_by_meta[m].latency_ms:
            best_by_meta[m] = r
    ranked = sorted(best_by_meta.items(), key=lambda kv: kv[1].latency_ms)
    pin_run = best_by_meta.get(pin_meta)
    contenders = [contest.Contender(pin_meta, "pin" if current else "default", pin_run and pin_run.run_id,
                                    pin_run and pin_run.latency_ms)]
    contenders += [contest.Contender(m, "candidate", r.run_id, r.latency_ms)
                   for m, r in ranked if m != pin_meta][: cfg.promote.top_k]

    p = cfg.promote
    remeasured = False
    refusal: Optional[str] = None
    if p.remeasure and gpu == setup.gpu:
        rounds, reps = setup.contest_timing(p.rounds, p.reps)
        contest.remeasure(problem, variant, contenders, precision, TOLERANCE[precision], rounds, reps, setup.device,
                          check=setup.check)
        remeasured = True
    elif p.remeasure:
        refusal = (f"this machine is {setup.gpu}, not {gpu}: the decision below uses logged numbers only and "
                   "no pin is written (promote.remeasure=false writes from logged numbers)")
    decision = contest.decide(contenders, p.min_gain, p.confidence)
    report = contest.table(contenders, decision)
    print(f"promote: {problem.name} ({key}) · kernel {variant.name} · {gpu} · {len(runs)} candidate run(s)"
          f"{'' if remeasured else ' · NOT re-measured: logged numbers'}\n{report}")

    diff = ""
    if decision.promote and refusal is None and not p.dry_run:
        w = decision.winner
        provenance = {
            "run_id": w.run_id, "experiment": setup.experiment(),
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "latency_ms": round(w.median_ms, 5), "remeasured": remeasured, "problem": problem.name,
            "previous": {"meta": pin_meta.as_dict(), "source": "pin" if current else "kernel default"},
            "gain": round(decision.gain, 4), "ratio_lower_bound": round(decision.ratio_lo, 4),
            "torch_version": here[Tag.TORCH_VERSION], "triton_version": here[Tag.TRITON_VERSION],
            "kernel_source_hash": variant.source_hash,
        }
        before, after = pins.write_pin(path, gpu, variant.name, key, w.meta, provenance)
        diff = "".join(difflib.unified_diff(before.splitlines(True), after.splitlines(True), str(path), str(path)))
        print(f"\npins file {path}:\n{diff}")
        if w.run_id:
            tracker.log(w.run_id, tags={Tag.PROMOTED: "true"})
    if refusal:
        print(f"refused: {refusal}")

    exp = tracker.experiment_id(setup.experiment())
    run = tracker.start_run(exp, f"promote {problem.name}", {Tag.KIND: "promote", **git_tags()})
    tracker.log(run, params={Param.PROBLEM: problem.name, Param.PROBLEM_KEY: problem.key(), Param.KERNEL: variant.name,
                             Param.PRECISION: precision, Param.TARGET_DEVICE: gpu,
                             **{f"{Param.PROMOTE_PREFIX}{k}": v for k, v in p.items()}},
                metrics={k: v for k, v in ((Metric.GAIN, decision.gain), (Metric.RATIO_LOWER_BOUND, decision.ratio_lo),
                                           (Metric.RATIO_UPPER_BOUND, decision.ratio_hi)) if v is not None},
                tags={Tag.DECISION: "promoted" if decision.promote and not refusal and not p.dry_run else "kept",
                      Tag.REASON: refusal or decision.reason, Tag.DEVICE: setup.gpu})
    tracker.log_text(run, report + "\n", "contest.md")
    if diff:
        tracker.log_text(run, diff, "pins.diff")
    tracker.end(run, "FINISHED")
    return 1 if refusal else 0
