"""`python promote.py`: pin the true winner for a problem, or keep the current pin and say why.

Candidates are FINISHED, correct (`status=ok`) runs for the same problem key, kernel variant, kernel source
hash, precision and device name; with `kernel=library`, the runs of every kernel the library has
(kernels.LIBRARY_KERNELS), so that the pin can name the faster kernel for the key. What the library runs for
the key now is always in the contest: its pin, or for a key with no pin torch's own convolution (the library's
dispatch runs torch there), which contends at the same precision in any case unless promote.torch=false (then an
unpinned key's baseline is the kernel's default). A pin may therefore say `torch`: the library then runs torch's convolution for that key, so a
shape our kernel loses on is never slower than torch.
The top-k candidates and the pin are re-checked and re-timed head to head (convtune.measure.contest); only a gain
of at least promote.min_gain whose bootstrap lower bound also clears it is written, with its provenance.
"""

from __future__ import annotations

import datetime
import difflib
from pathlib import Path
from dataclasses import dataclass
from typing import Any, Optional

from omegaconf import DictConfig

from convtune.config import tolerance
from convtune.errors import ConfigError
from convtune.device import capability_of, git_tags
from convtune.resolve import Setup, resolve
from convtune.record import Identity, Metric, Param, RunView, Tag
from convtune.track.store import Tracker, outer_run, say_reaped


def candidate_runs(tracker: Tracker, identity: Identity) -> list[RunView]:
    """The finished, correct runs of `identity`; a run whose launch keys are not integers (`num_stages=True`, logged
    from a pin that said `true` before pins were read strictly) is left out and counted, never a crash."""
    runs, unreadable = [], []
    for r in map(RunView, tracker.search(identity.candidates_filter())):
        try:
            r.meta
        except (KeyError, ValueError):
            unreadable.append(r.run_id)
            continue
        runs.append(r)
    if unreadable:
        print(f"ignoring {len(unreadable)} {identity.kernel} run(s) whose launch keys are not integers: "
              + ", ".join(unreadable[:3]) + (" ..." if len(unreadable) > 3 else ""))
    return runs


def validate(p: DictConfig) -> None:
    """promote.* values, each checked with a message naming the key, the value and what is allowed."""
    checks = (("top_k", p.top_k >= 1, "an integer >= 1"), ("rounds", p.rounds >= 2, "an integer >= 2 (the bootstrap needs rounds)"),
              ("reps", p.reps >= 1, "an integer >= 1"), ("min_gain", p.min_gain >= 0, "a fraction >= 0 (0.02 = 2 %)"),
              ("confidence", 0.5 <= p.confidence < 1, "a probability in [0.5, 1)"))
    for key, ok, allowed in checks:
        if not ok:
            raise ConfigError(f"promote.{key}", p[key], allowed)


@dataclass
class Contest:
    """What promote weighs: the pin (this key's own, or the default) and the best candidates."""
    gpu: str
    key: str
    pin_value: Any  # as the pins section holds it: a Meta, a pins.KernelPin or pins.TORCH
    pinned: bool  # False: the pin is the kernel's default
    pin_run_id: Optional[str]  # the run the pin was promoted from, as its provenance says
    runs: list[RunView]
    contenders: list[Any]  # contest.Contender, the pin first
    in_target: Any = None  # what the written file itself pins for the key (None: nothing; the holder is a lower layer's)


def run_promote(cfg: DictConfig) -> int:
    """Returns the process exit status: 0 for a decision (promoted or kept), 1 for a refusal."""
    validate(cfg.promote)
    setup = resolve(cfg)
    if setup.notice:
        print(setup.notice)
    setup.raise_error()
    from convtune.measure import contest  # only after resolve: the device decides how kernels load

    p = cfg.promote
    if not p.dry_run:  # before the contest: its minutes are not spent on a decision that cannot be written
        from convtune import pins

        if setup.pins_path is None:
            raise ConfigError("pins_file", None, "a path: without one promote writes this GPU's per-user overlay, and "
                                                 "it is off (CONVTUNE_OVERLAY_DIR=off)")
        pins.check_writable(setup.pins_path)
    if p.torch and not torch_contends(setup):
        print(f"promote: on the interpreter torch does not contend at precision={setup.precision}: the judge's "
              "reference there is cuDNN's TF32 rule, emulated on the CPU, which torch's CPU convolution does not "
              "follow; the kernels contend alone, an unpinned key against its kernel's default (as with "
              "promote.torch=false)")
    store_file = setup.tracking_uri[len("sqlite:///"):] if setup.tracking_uri.startswith("sqlite:///") else None
    if store_file is not None and not Path(store_file).exists():  # nothing swept: no store is made, no contest run
        print(f"promote: no store at {setup.tracking_uri}: nothing has been swept there yet; sweep the key first:\n"
              f"  {sweep_command(setup)}")
        return 1
    tracker = Tracker(setup.tracking_uri)
    say_reaped(tracker.reap_orphans())
    c = gather(setup, tracker)
    if not c.runs:
        print(f"promote: no finished, correct runs of {', '.join(k.name for k in contested_kernels(setup))} for "
              f"{c.key} on {c.gpu} in {setup.tracking_uri}: nothing to contest; sweep the key first:\n"
              f"  {sweep_command(setup)}")
        return 1
    remeasured, refusal = False, None
    if p.remeasure and c.gpu == setup.gpu:
        rounds, reps = setup.contest_timing(p.rounds, p.reps)
        contest.remeasure(setup.problem, c.contenders, setup.precision, tolerance(setup.precision, setup.problem.dtype),
                          rounds, reps, setup.device, check=setup.check)
        remeasured = True
    elif p.remeasure:
        refusal = (f"this machine is {setup.gpu}, not {c.gpu}: the decision below uses logged numbers only and "
                   "no pin is written (promote.remeasure=false writes from logged numbers)")
    decision = contest.decide(c.contenders, p.min_gain, p.confidence)
    report = contest.table(c.contenders, decision)
    print(f"promote: {setup.problem.name} ({c.key}) · {describe_kernels(setup)} · {c.gpu} · {len(c.runs)} run(s) "
          f"of the key in the store, {len(c.contenders)} contender(s) below"
          f"{'' if remeasured else ' · NOT re-measured: logged numbers'}\n{report}")
    promoted = decision.promote and refusal is None and not p.dry_run
    diff = ""
    if promoted:
        from convtune.pins import PinChanged

        try:
            diff = write_winner(setup, tracker, c, decision, remeasured)
        except PinChanged as e:  # another promote pinned this key meanwhile: this contest was against a pin now gone
            promoted, refusal = False, str(e)
    if refusal:
        print(f"refused: {refusal}")
    run = record_decision(setup, tracker, c, decision, report, diff, "promoted" if promoted else "kept", refusal)
    print(next_step(setup, tracker, c, promoted, run))
    return 1 if refusal else 0


def torch_contends(setup: Setup) -> bool:
    """Whether torch's convolution can be judged here as a contender: on a GPU always; on the interpreter only at a
    precision where torch's CPU result is the judge's reference (no TF32: on the CPU, torch computes in fp32 and
    the TF32 reference is emulated, so torch "failed the check" and its key was pinned with no gain)."""
    from convtune.kernels.precision import torch_uses_tf32

    return not setup.interpreted or not torch_uses_tf32(setup.precision)


def sweep_command(setup: Setup) -> str:
    """The sweep that gives promote runs to weigh for this key."""
    precision = "" if setup.precision == "tf32" else f" precision={setup.precision}"
    return (f"python run.py -m problem={setup.problem.name} kernel={setup.cfg.kernel.name}{precision} num_warps=4,8 "
            f"tracking.uri={setup.tracking_uri}")


def next_step(setup: Setup, tracker: Tracker, c: Contest, promoted: bool, run_id: str) -> str:
    """What changed in the pins, what the library now runs for the key on its GPU, and the decision's run."""
    from convtune import pins
    from convtune.library import dispatch
    from convtune.track import dashboard
    from convtune.track.store import UI_DEFAULT

    now = dispatch.decide(setup.problem, c.gpu, capability_of(setup.device_tags) if c.gpu == setup.gpu else None,
                          setup.precision, files=setup.pins_read, first_use_on=False)
    runs = "torch's convolution" if now.value == pins.TORCH else f"convtune's {pins.describe(now.value)}"
    changed = (f"the pins file {setup.pins_path} now pins {c.key} on {c.gpu}" if promoted
               else f"the pins file {setup.pins_path} is unchanged")
    server = setup.tracking_uri.startswith(("http://", "https://"))
    experiment = tracker.experiment_id(setup.experiment())
    link = dashboard.run_link(experiment, run_id, (setup.tracking_uri.rstrip("/") if server else UI_DEFAULT) + "/")
    where = link if server else f"mlflow ui --backend-store-uri {setup.tracking_uri}   then {link}"
    return f"next: {changed}; the library runs {runs} for that key there ({now.source}).\ndecision run: {where}"


def contested_kernels(setup: Setup) -> list[Any]:
    """The kernels whose runs are candidates: every kernel the library has for `kernel=library` (the pin may then
    name any of them), else the one named."""
    from convtune.kernels import LIBRARY, LIBRARY_KERNELS, get_variant

    if setup.cfg.kernel.name == LIBRARY:
        return [get_variant(k) for k in LIBRARY_KERNELS]
    return [setup.pin_variant]


def describe_kernels(setup: Setup) -> str:
    names = ", ".join(k.name for k in contested_kernels(setup))
    return f"kernel {setup.cfg.kernel.name} (runs of {names})" if setup.cfg.kernel.name != setup.pin_variant.name \
        else f"kernel {names}"


def gather(setup: Setup, tracker: Tracker) -> Contest:
    """The pin and the top-k candidates: the fastest logged run of each (kernel, configuration), stale sources
    ignored unless promote.allow_stale."""
    from convtune.kernels import Meta, get_variant
    from convtune import pins
    from convtune.measure.contest import Contender

    p = setup.cfg.promote
    gpu = p.device_name or setup.gpu
    key, section, problem = setup.pin_key(), setup.pin_variant, setup.problem
    # The contest is against this key's own pin (or the default), not the nearest pinned shape the library
    # would fall back on: a pin is written for this key only. The holder is what the library reads first: the
    # written file's pin (the per-user overlay, or pins_file=), else a pin of the layers under it (the packaged pins).
    in_target = pins.pin_for(pins.load(setup.pins_path), gpu, key) if setup.pins_path else None
    current = in_target or pins.pin_for(pins.load_layers(setup.pins_read), gpu, key)
    # A key with no pin runs torch in the library (library/dispatch.py), so torch is what a candidate must beat
    # there, the kernel's default included; with promote.torch=false (a study of the kernel alone), or on the
    # interpreter (where torch's CPU time and the interpreter's do not compare), the default is.
    with_torch = p.torch and torch_contends(setup)
    pin_value = pins.value_of(*current) if current else pins.TORCH if with_torch else section.default_meta(
        problem.out_channels, problem.stride[1], problem.width, setup.precision)
    pin_kernel, pin_meta = ((get_variant(pin_value.kernel), pin_value.meta) if isinstance(pin_value, pins.KernelPin)
                            else (None if pin_value == pins.TORCH else section, pin_value))
    runs: list[RunView] = []
    best: dict[tuple[str, Any], tuple[Any, RunView]] = {}  # (kernel, Meta) → (variant, its fastest run)
    contested = contested_kernels(setup)
    # the pin's own kernel's runs too (a pin may name another kernel): its logged time is the pin's
    for kernel in contested + ([pin_kernel] if pin_kernel and pin_kernel not in contested else []):
        identity = Identity(gpu, kernel.name, kernel.source_hash, problem.key(), setup.precision, kernel.previous_hashes)
        found = candidate_runs(tracker, identity)
        stale = [r for r in found if identity.is_stale(r)]
        if stale and not p.allow_stale:
            print(f"ignoring {len(stale)} {kernel.name} run(s) made with an older kernel source (promote.allow_stale=true "
                  "admits them)")
            found = [r for r in found if r not in stale]
        elif stale:
            print(f"promote.allow_stale=true: {len(stale)} {kernel.name} run(s) of an older kernel source are candidates")
        runs += found if kernel in contested else []
        for r in found:
            k = (kernel.name, Meta(**r.meta))
            if k not in best or r.latency_ms < best[k][1].latency_ms:
                best[k] = (kernel, r)
    ranked = sorted(best.items(), key=lambda kv: kv[1][1].latency_ms)
    pin_run = best.get((pin_kernel.name, pin_meta), (None, None))[1] if pin_kernel else None
    pin_ms = _logged_torch_ms(runs) if pin_value == pins.TORCH else pin_run and pin_run.latency_ms
    role = "pin" if current else "unpinned" if pin_value == pins.TORCH else "default"
    contenders = [Contender(pin_meta, role, pin_run and pin_run.run_id, pin_ms,
                            kernel=pin_kernel)]
    contenders += [Contender(m, "candidate", r.run_id, r.latency_ms, kernel=k)
                   for (name, m), (k, r) in ranked
                   if k in contested and (pin_kernel is None or (name, m) != (pin_kernel.name, pin_meta))][: p.top_k]
    if with_torch and pin_value != pins.TORCH:
        contenders.append(Contender(pins.TORCH, "torch", None, _logged_torch_ms(runs)))
    return Contest(gpu, key, pin_value, current is not None, ((current[1] if current else {}).get("provenance") or {})
                   .get("run_id"), runs, contenders, pins.value_of(*in_target) if in_target else None)


def _logged_torch_ms(runs: list[RunView]) -> Optional[float]:
    """torch's logged time for the key: the runs' cuDNN baseline in the key's layout (NCHW), timed with
    cudnn.benchmark on as the contest does."""
    logged = [v for r in runs if (v := r.metric(Metric.CUDNN_NCHW_MS)) is not None]
    return min(logged) if logged else None


def write_winner(setup: Setup, tracker: Tracker, c: Contest, decision: Any, remeasured: bool) -> str:
    """Write the winner's pin with its provenance, mark its run promoted; returns the pins file's diff."""
    from convtune import pins

    w, path, here, section = decision.winner, setup.pins_path, setup.device_tags, setup.pin_variant
    value = pins.TORCH if w.meta == pins.TORCH else pins.KernelPin(w.kernel.name, w.meta)
    provenance = {
        "run_id": w.run_id, "experiment": setup.experiment(),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "latency_ms": round(w.median_ms, 5), "remeasured": remeasured, "problem": setup.problem.name,
        "previous": {**_as_previous(c.pin_value, section.name), "source": "pin" if c.pinned else "unpinned" if c.pin_value == pins.TORCH
                     else "kernel default",
                     **({"run_id": c.pin_run_id} if c.pinned else {})},
        # None where the pin was replaced for being wrong: there is no ratio to a wrong answer
        "gain": _rounded(decision.gain), "ratio_lower_bound": _rounded(decision.ratio_lo),
        "torch_version": here[Tag.TORCH_VERSION], "triton_version": here[Tag.TRITON_VERSION],
        "kernel_source_hash": (w.kernel or section).source_hash,
    }
    # `expect`: written only over the pin this contest beat (two promotes on one key: the second is refused)
    # the GPU's compute capability goes into the file's gpus table where this machine is the pin's GPU (what makes
    # its pins a family's: kernels/pins.family_sources)
    before, after = pins.write_pin(path, c.gpu, section.name, c.key, value, provenance,
                                   expect=c.in_target,
                                   capability=capability_of(here) if c.gpu == setup.gpu else None)
    diff = "".join(difflib.unified_diff(before.splitlines(True), after.splitlines(True), str(path), str(path)))
    runs = "torch's convolution" if w.meta == pins.TORCH else f"convtune's {w.kernel.name}"
    print(f"\npins file {path} (the library now runs {runs} for {c.key}):\n{diff}")
    if w.run_id:
        tracker.log(w.run_id, tags={Tag.PROMOTED: "true"})
    return diff


def _as_previous(value: Any, kernel: str) -> dict[str, Any]:
    """What held the key before, as a pin's provenance records it: the kernel and its configuration, or torch."""
    from convtune import pins

    if value == pins.TORCH:
        return {"backend": pins.TORCH}
    pin = pins.named(value, kernel)
    return {"kernel": pin.kernel, "meta": pin.meta.as_dict()}


def _rounded(v: Optional[float]) -> Optional[float]:
    return None if v is None else round(v, 4)


def record_decision(setup: Setup, tracker: Tracker, c: Contest, decision: Any, report: str, diff: str,
                    outcome: str, refusal: Optional[str]) -> str:
    """The decision as an MLflow run (kind=promote) beside the runs it weighed, with contest.md and pins.diff."""
    p, problem = setup.cfg.promote, setup.problem
    experiment = tracker.experiment_id(setup.experiment())
    run = tracker.start_run(experiment, f"promote {problem.name}", {Tag.KIND: "promote", **git_tags()},
                            parent_id=outer_run(tracker, setup.cfg.tracking.get("parent_run"), experiment))
    tracker.log(run, params={Param.PROBLEM: problem.name, Param.PROBLEM_KEY: problem.key(),
                             Param.KERNEL: setup.cfg.kernel.name, Param.PRECISION: setup.precision,
                             Param.TARGET_DEVICE: c.gpu, **{f"{Param.PROMOTE_PREFIX}{k}": v for k, v in p.items()}},
                metrics={k: v for k, v in ((Metric.GAIN, decision.gain), (Metric.RATIO_LOWER_BOUND, decision.ratio_lo),
                                           (Metric.RATIO_UPPER_BOUND, decision.ratio_hi)) if v is not None},
                tags={Tag.DECISION: outcome, Tag.REASON: refusal or decision.reason, Tag.DEVICE: setup.gpu})
    tracker.log_text(run, report + "\n", "contest.md")
    if diff:
        tracker.log_text(run, diff, "pins.diff")
    tracker.end(run, "FINISHED")
    return run
