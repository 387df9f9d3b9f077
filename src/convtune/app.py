"""run_job: one Hydra job = one MLflow run. The only room (with promote) that sees the whole picture.

Failures are data: a configuration that cannot run (semantic check, OutOfResources, compile or launch
error) becomes a FAILED run with `error.type`/`error.message` tags, a wrong result an `incorrect` one, and
a sweep goes on. A single run that fails exits non-zero with the same one-line message.
"""

from __future__ import annotations

import logging
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any, Optional

from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf

from convtune import interrupts, runtime
from convtune.config import TOLERANCE
from convtune.problem import ConvProblem
from convtune.summary import META_KEYS
from convtune.sweep import SweepState
from convtune.tracking import Tracker, resolve_uri

log = logging.getLogger(__name__)


class _Job:
    """What one job knows before it measures anything; collects params and tags as it learns them."""

    def __init__(self, cfg: DictConfig) -> None:
        hc = HydraConfig.get()
        self.cfg = cfg
        self.multirun = hc.mode == RunMode.MULTIRUN
        self.sweep = SweepState.load(Path(hc.sweep.dir)) if self.multirun else None
        self.number = hc.job.num + 1 if self.multirun else 1
        self.total = self.sweep.total_jobs if self.sweep else (None if self.multirun else 1)
        self.given = {k: cfg[k] for k in META_KEYS}
        self.precision = runtime.enum_value(cfg.precision)
        self.params: dict[str, Any] = {k: ("default" if v is None else v) for k, v in self.given.items()}
        self.params.update({"kernel": cfg.kernel.name, "precision": self.precision, "check": runtime.enum_value(cfg.check),
                            "device_choice": runtime.enum_value(cfg.device),
                            "seed": cfg.seed, "problem": cfg.problem.name})
        self.params.update({f"bench.{k}": runtime.enum_value(v) for k, v in cfg.bench.items()})
        self.tags: dict[str, Any] = {"status": "running", "problem": cfg.problem.name, "precision": self.precision,
                                     "kernel": cfg.kernel.name, **runtime.git_tags()}
        self.label = " ".join(f"{k}={self.params[k]}" for k in META_KEYS)
        self.setup_error: Optional[Exception] = None
        self.device = "unknown"
        self.variant: Any = None
        self.meta: Any = None
        self.problem_node = cfg.problem  # replaced by the target's (tiny under the interpreter) once known
        try:
            target = runtime.target_for(cfg, hc)
            self.device, self.problem_node = target.device, target.problem
            if target.notice and not self.multirun:
                print(target.notice, flush=True)
            runtime.activate(self.device)
            self.tags.update(runtime.device_tags(self.device))
            from convtune import kernels  # only now: TRITON_INTERPRET must be settled first

            self.variant = kernels.get_variant(cfg.kernel.name)
            self.problem = ConvProblem.from_mapping(self.problem_node)
            base, source = kernels.configured_meta(self.variant, runtime.pins_path(cfg, Path(hc.runtime.cwd)),
                                                   self.tags["device"], self.problem, self.precision)
            self.meta = kernels.Meta.fill(self.given, base)
            explicit = [k for k, v in self.given.items() if v is not None]
            self.tags["meta_source"] = "explicit" if len(explicit) == len(META_KEYS) else source
            self.params.update(self.meta.as_dict())
            self.label = self.meta.label()
            self.tags["kernel_source_hash"] = self.variant.source_hash
        except (ValueError, RuntimeError) as e:  # ConfigError, UnsupportedProblem, a device mismatch
            self.setup_error = e
        self.params["problem"] = self.problem_node.name
        self.tags["problem"] = self.problem_node.name

    def run_name(self) -> str:
        return self.meta.short() if self.meta is not None else "-".join(str(self.params[k]) for k in META_KEYS)

    def experiment_id(self, tracker: Tracker) -> str:
        if self.sweep is not None:
            return self.sweep.experiment_id
        return tracker.experiment_id(runtime.experiment_name(self.cfg, self.problem_node.name, self.device))


def run_job(cfg: DictConfig) -> Optional[float]:
    """Check, time and log one configuration. Returns the latency in ms, or None when it did not run.

    From the moment the run exists until its outcome is recorded, an interrupt (SIGINT/SIGTERM, anywhere,
    recording included) records it KILLED: the entry point's interrupts.guard runs the registered cleanup."""
    job = _Job(cfg)
    tracker = Tracker(job.sweep.tracking_uri if job.sweep else resolve_uri(cfg.tracking.uri, Path(HydraConfig.get().runtime.cwd)))
    metrics: dict[str, float] = {}
    with interrupts.deferred():  # no window between the run's creation and its cleanup's registration
        run_id = tracker.start_run(job.experiment_id(tracker), job.run_name(), job.tags,
                                   parent_id=job.sweep.parent_run_id if job.sweep else None)
        on_kill = interrupts.on_interrupt(
            lambda sig: _record(tracker, run_id, job, metrics, "killed", "Interrupted", f"interrupted ({sig})"))
    interrupts.checkpoint("job_running")
    try:
        tracker.log_text(run_id, OmegaConf.to_yaml(cfg, resolve=True), "config.yaml")
        if job.setup_error is not None:
            raise job.setup_error
        status, message, metrics = _measure(job)
        error_type = None if status == "ok" else "IncorrectResult"
    except Exception as e:  # noqa: BLE001 - every failure of a configuration is recorded, not raised
        status, error_type = "failed", type(e).__name__
        message = str(e).strip().splitlines()[0] if str(e).strip() else error_type
    with interrupts.deferred():
        _record(tracker, run_id, job, metrics, status, error_type, message)
        on_kill.cancel()
    interrupts.checkpoint("job_finished")
    where = f"[{job.number}/{job.total or '?'}] {job.label} →"
    if status == "ok":
        log.info(f"{where} {metrics['latency_ms']:.3f} ms, {metrics['tflops']:.3g} TFLOPS, ok"
                 + (f" ({job.device})" if job.device == runtime.INTERPRETER else ""))
        return metrics["latency_ms"]
    log.info(f"{where} {status}: " + (f"{error_type}: {message}" if status == "failed" else message))
    if not job.multirun:
        sys.exit(f"error: {message}" if status == "failed" else f"error: incorrect result: {message}")
    return None


def _measure(job: _Job) -> tuple[str, str, dict[str, float]]:
    from convtune import kernels, measure
    from convtune.bench import TimingSettings
    from convtune.calibrate import apply_cache
    from convtune.metrics import gpu_spec

    problem = job.problem
    job.params.update(problem.params())
    job.tags["problem_key"] = problem.key()
    kernels.validate_meta(job.meta)
    kernels.validate_precision(job.precision)
    b = job.cfg.bench
    settings = TimingSettings(runtime.enum_value(b.mode), b.rounds, b.reps, b.warmup, b.flush_l2)
    spec = None
    if job.device == runtime.INTERPRETER:
        # Host-clock numbers of the interpreter say nothing about a GPU: 2×2 calls show the pipeline works
        # without spending a minute on a number nobody should read (0.4 s a call on `tiny`).
        settings = replace(settings, rounds=min(b.rounds, 2), reps=min(b.reps, 2), warmup=0)
        job.params.update({"bench.rounds": settings.rounds, "bench.reps": settings.reps, "bench.warmup": 0})
    else:
        spec = apply_cache(gpu_spec(job.tags["device"]), job.tags["device"])
        if spec is None:
            log.warning(f"GPU '{job.tags['device']}' is not in convtune.metrics.GPU_SPECS: pct_peak_* omitted")
    m = measure.measure(problem, job.variant, job.meta, job.precision, TOLERANCE[job.precision], job.cfg.seed,
                        settings, job.device, spec, with_cudnn=b.cudnn_baseline, check=runtime.enum_value(job.cfg.check))
    job.tags.update(m.tags)
    if runtime.enum_value(job.cfg.profile) == "ncu" and m.status == "ok":
        m.metrics.update(_ncu(job, problem))
    return m.status, m.message, m.metrics


def _ncu(job: _Job, problem: ConvProblem) -> dict[str, float]:
    """NCU counters for one extra launch in a child process; a missing or refused ncu is a tag, not a failure."""
    from convtune import ncu

    if job.device == runtime.INTERPRETER:
        counters, status = {}, "ncu needs a GPU: no NCU counters under the interpreter"
    else:
        spec = {**{k: getattr(problem, k) for k in problem.__dataclass_fields__}, "stride": list(problem.stride),
                "padding": list(problem.padding), "dilation": list(problem.dilation)}
        counters, status = ncu.profile({"problem": spec, "kernel": job.variant.name, "meta": job.meta.as_dict(),
                                        "precision": job.precision, "seed": job.cfg.seed})
    job.tags["ncu_status"] = status
    if not counters:
        log.info(status)
    out = {ncu.metric_name(k): v for k, v in counters.items()}
    moved = counters.get("dram__bytes_read.sum", 0) + counters.get("dram__bytes_write.sum", 0)
    if moved:
        out["ncu_arithmetic_intensity"] = problem.flops / moved
        out["ncu_dram_bytes_over_min"] = moved / problem.min_bytes
    return out


def _record(tracker: Tracker, run_id: str, job: _Job, metrics: dict[str, float], status: str,
            error_type: Optional[str], message: str) -> None:
    tags = {**job.tags, "status": status}
    if error_type:
        tags.update({"error.type": error_type, "error.message": message})
    tracker.log(run_id, params=job.params, metrics=metrics, tags=tags)
    tracker.end(run_id, {"ok": "FINISHED", "killed": "KILLED"}.get(status, "FAILED"))
