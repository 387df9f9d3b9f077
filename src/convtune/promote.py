"""`python promote.py`: pin the true winner for a problem, or keep the current pin and say why.

Candidates are FINISHED, correct (`status=ok`) runs for the same problem key, kernel variant, kernel source
hash, precision and device name; the current pin (or the kernel's default) is always in the contest.
The top-k candidates and the pin are re-checked and re-timed head to head (convtune.contest); only a gain
of at least promote.min_gain whose bootstrap lower bound also clears it is written, with its provenance.
"""

from __future__ import annotations

import datetime
import difflib
from pathlib import Path
from typing import Any, Optional

from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from convtune import runtime
from convtune.config import TOLERANCE
from convtune.errors import ConfigError
from convtune.problem import ConvProblem
from convtune.summary import META_KEYS
from convtune.tracking import Tracker, resolve_uri


def candidate_runs(tracker: Tracker, gpu: str, kernel: str, problem_key: str, precision: str) -> list[dict[str, Any]]:
    return tracker.search(f"tags.problem_key = '{problem_key}' AND tags.kernel = '{kernel}' AND "
                          f"tags.precision = '{precision}' AND tags.device = '{gpu}' AND tags.status = 'ok' AND "
                          "attributes.status = 'FINISHED'")


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
    hc = cfg.hydra if "hydra" in cfg else HydraConfig.get()  # a callback's config carries its hydra node
    base = Path(hc.runtime.cwd)
    target = runtime.target_for(cfg, hc)
    if target.notice:
        print(target.notice)
    runtime.activate(target.device)
    from convtune import contest  # imports the kernels: only once TRITON_INTERPRET is settled
    from convtune.kernels import Meta, get_variant, pins

    here = runtime.device_tags(target.device)
    gpu = cfg.promote.device_name or here["device"]
    problem = ConvProblem.from_mapping(target.problem)
    variant = get_variant(cfg.kernel.name)
    precision = runtime.enum_value(cfg.precision)
    key = pins.pin_key(problem.key(), precision)
    path = runtime.pins_path(cfg, base)
    current = pins.entries(pins.load(path), gpu, variant.name).get(key)
    pin_meta = Meta(**current["meta"]) if current else variant.default_meta(
        problem.out_channels, problem.stride[1], problem.width, precision)
    tracker = Tracker(resolve_uri(cfg.tracking.uri, base))

    runs = candidate_runs(tracker, gpu, variant.name, problem.key(), precision)
    stale = [r for r in runs if r["tags"].get("kernel_source_hash") != variant.source_hash]
    if stale and not cfg.promote.allow_stale:
        print(f"ignoring {len(stale)} run(s) made with an older kernel source (promote.allow_stale=true admits them)")
        runs = [r for r in runs if r not in stale]
    elif stale:
        print(f"promote.allow_stale=true: {len(stale)} run(s) of an older kernel source are candidates")
    best_by_meta: dict[Meta, dict[str, Any]] = {}
    for r in runs:
        m = Meta(**{k: int(r["params"][k]) for k in META_KEYS})
        if m not in best_by_meta or r["metrics"]["latency_ms"] < best_by_meta[m]["metrics"]["latency_ms"]:
            best_by_meta[m] = r
    ranked = sorted(best_by_meta.items(), key=lambda kv: kv[1]["metrics"]["latency_ms"])
    pin_run = best_by_meta.get(pin_meta)
    contenders = [contest.Contender(pin_meta, "pin" if current else "default", pin_run and pin_run["run_id"],
                                    pin_run and pin_run["metrics"]["latency_ms"])]
    contenders += [contest.Contender(m, "candidate", r["run_id"], r["metrics"]["latency_ms"])
                   for m, r in ranked if m != pin_meta][: cfg.promote.top_k]

    p = cfg.promote
    remeasured = False
    refusal: Optional[str] = None
    if p.remeasure and gpu == here["device"]:
        rounds, reps = p.rounds, p.reps
        if target.device == runtime.INTERPRETER:  # host-clock numbers; enough to exercise the decision
            rounds, reps = min(rounds, 4), 1
        contest.remeasure(problem, variant, contenders, precision, TOLERANCE[precision], rounds, reps, target.device,
                           check=runtime.enum_value(cfg.check))
        remeasured = True
    elif p.remeasure:
        refusal = (f"this machine is {here['device']}, not {gpu}: the decision below uses logged numbers only and "
                   "no pin is written (promote.remeasure=false writes from logged numbers)")
    decision = contest.decide(contenders, p.min_gain, p.confidence)
    report = contest.table(contenders, decision)
    print(f"promote: {problem.name} ({key}) · kernel {variant.name} · {gpu} · {len(runs)} candidate run(s)"
          f"{'' if remeasured else ' · NOT re-measured: logged numbers'}\n{report}")

    diff = ""
    if decision.promote and refusal is None and not p.dry_run:
        w = decision.winner
        provenance = {
            "run_id": w.run_id, "experiment": runtime.experiment_name(cfg, problem.name, target.device),
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "latency_ms": round(w.median_ms, 5), "remeasured": remeasured, "problem": problem.name,
            "previous": {"meta": pin_meta.as_dict(), "source": "pin" if current else "kernel default"},
            "gain": round(decision.gain, 4), "ratio_lower_bound": round(decision.ratio_lo, 4),
            "torch_version": here["torch_version"], "triton_version": here["triton_version"],
            "kernel_source_hash": variant.source_hash,
        }
        before, after = pins.write_pin(path, gpu, variant.name, key, w.meta, provenance)
        diff = "".join(difflib.unified_diff(before.splitlines(True), after.splitlines(True), str(path), str(path)))
        print(f"\npins file {path}:\n{diff}")
        if w.run_id:
            tracker.log(w.run_id, tags={"convtune.promoted": "true"})
    if refusal:
        print(f"refused: {refusal}")

    exp = tracker.experiment_id(runtime.experiment_name(cfg, problem.name, target.device))
    run = tracker.start_run(exp, f"promote {problem.name}", {"kind": "promote", **runtime.git_tags()})
    tracker.log(run, params={"problem": problem.name, "problem_key": problem.key(), "kernel": variant.name,
                             "precision": precision, "target_device": gpu, **{f"promote.{k}": v for k, v in p.items()}},
                metrics={k: v for k, v in (("gain", decision.gain), ("ratio_lower_bound", decision.ratio_lo),
                                           ("ratio_upper_bound", decision.ratio_hi)) if v is not None},
                tags={"decision": "promoted" if decision.promote and not refusal and not p.dry_run else "kept",
                      "reason": refusal or decision.reason, "device": here["device"]})
    tracker.log_text(run, report + "\n", "contest.md")
    if diff:
        tracker.log_text(run, diff, "pins.diff")
    tracker.end(run, "FINISHED")
    return 1 if refusal else 0
