"""run_job: one Hydra job = one MLflow run. The only room (with promote) that sees the whole picture.

Failures are data: a configuration that cannot run (semantic check, OutOfResources, compile or launch
error) becomes a FAILED run with `error.type`/`error.message` tags, a wrong result an `incorrect` one, and
a sweep goes on. A single run that fails exits non-zero with the same one-line message.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Any, Optional

from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf

from convtune import interrupts
from convtune.config import tolerance
from convtune.config import enum_value
from convtune.resolve import Setup, experiment_name, resolve
from convtune.sweep_state import SweepState
from convtune.record import Metric, RunView, Status, Tag
from convtune.track.store import Tracker, say_reaped

log = logging.getLogger(__name__)


class _Job:
    """One job: its setup, where it sits in a sweep, and the params and tags it collects as it learns them."""

    def __init__(self, cfg: DictConfig) -> None:
        hc = HydraConfig.get()
        self.multirun = hc.mode == RunMode.MULTIRUN
        self.sweep = SweepState.of_this_sweep(Path(hc.sweep.dir)) if self.multirun else None
        self.number = hc.job.num + 1 if self.multirun else 1
        self.total = self.sweep.total_jobs if self.sweep else (None if self.multirun else 1)
        self.setup: Setup = resolve(cfg, sweep_device=self.sweep.device if self.sweep else None)
        if self.setup.notice and not self.multirun:
            print(self.setup.notice, flush=True)
        self.params = self.setup.params()
        self.tags: dict[str, Any] = {**self.setup.tags(), Tag.STATUS: Status.RUNNING,
                                     **({Tag.JOB: hc.job.num} if self.multirun else {})}

    def run_name(self) -> str:
        return self.setup.run_name(self.sweep.varied if self.sweep else ())

    def experiment_id(self, tracker: Tracker) -> str:
        if self.sweep is not None:
            return self.sweep.experiment_id
        s = self.setup
        return tracker.experiment_id(experiment_name(s.cfg, s.problem_name, s.device))


def run_job(cfg: DictConfig) -> Optional[float]:
    """Check, time and log one configuration. Returns the latency in ms, or None when it did not run.

    From the moment the run exists until its outcome is recorded, an interrupt (SIGINT/SIGTERM, anywhere,
    recording included) records it KILLED: the entry point's interrupts.guard runs the registered cleanup."""
    job = _Job(cfg)
    tracker = Tracker(job.sweep.tracking_uri if job.sweep else job.setup.tracking_uri)
    if job.sweep is None:  # a sweep reaps once, when it starts (sweep.py)
        say_reaped(tracker.reap_orphans())
    if job.sweep is not None and job.setup.cfg.resume and job.setup.error is None:
        earlier = _measured_before(tracker, job.setup)
        if earlier is not None:
            return _resume(tracker, job, earlier)
    metrics: dict[str, float] = {}
    with interrupts.deferred():  # no window between the run's creation and its cleanup's registration
        run_id = tracker.start_run(job.experiment_id(tracker), job.run_name(), job.tags,
                                   parent_id=job.sweep.parent_run_id if job.sweep else None)
        on_kill = interrupts.on_interrupt(
            lambda sig: _record(tracker, run_id, job, metrics, Status.FAILED, "AbnormalExit",
                                "the process ended with an error while this run was open")
            if sig == interrupts.ABNORMAL_EXIT else
            _record(tracker, run_id, job, metrics, Status.KILLED, "Interrupted", f"interrupted ({sig})"))
    interrupts.checkpoint("job_running")
    try:
        tracker.log_text(run_id, OmegaConf.to_yaml(cfg, resolve=True), "config.yaml")
        job.setup.raise_error()
        status, message, metrics = _measure(job)
        error_type = None if status == Status.OK else "IncorrectResult"
    except Exception as e:  # noqa: BLE001 - every failure of a configuration is recorded, not raised
        status, error_type = Status.FAILED, type(e).__name__
        message = str(e).strip().splitlines()[0] if str(e).strip() else error_type
    with interrupts.deferred():
        _record(tracker, run_id, job, metrics, status, error_type, message)
        on_kill.cancel()
    interrupts.checkpoint("job_finished")
    where = f"[{job.number}/{job.total or '?'}] {job.setup.label()} →"
    if status == Status.OK:
        gbps = metrics.get(Metric.GBPS)
        log.info(f"{where} {metrics[Metric.LATENCY_MS]:.3f} ms, {metrics[Metric.TFLOPS]:.3g} TFLOPS"
                 + (f", {gbps:.0f} GB/s" if gbps is not None and gbps >= 100 else f", {gbps:.3g} GB/s"
                    if gbps is not None else "") + ", ok"
                 + (" (interpreter: CPU host time, for testing the pipeline)" if job.setup.interpreted else ""))
        return metrics[Metric.LATENCY_MS]
    log.info(f"{where} {status}: " + (f"{error_type}: {message}" if status == Status.FAILED else message))
    if not job.multirun:
        sys.exit(f"error: {message}" if status == Status.FAILED else f"error: incorrect result: {message}")
    return None


def _measured_before(tracker: Tracker, setup: Setup) -> Optional[RunView]:
    """The newest finished, correct run of this very measurement (identity, kernel source, launch keys, check,
    seed, timing settings), if any: `resume=true` (the default) does not measure it again."""
    found = [RunView(r) for f in setup.identity().same_measurement_filters(setup.measurement_params())
             for r in tracker.search(f) if not r["tags"].get(Tag.RESUMED_FROM)]
    return max(found, key=lambda r: r.raw["start_time"]) if found else None


def _resume(tracker: Tracker, job: _Job, earlier: RunView) -> Optional[float]:
    """A child that repeats the earlier run's record (params, metrics, tags) so this sweep's summary, plots and
    promote see it, tagged with where it came from; nothing is measured."""
    with interrupts.deferred():
        # this job's own tags, not the earlier run's (whose pin stays its own)
        own = (Tag.HOST, Tag.PROCESS, Tag.PROMOTED, Tag.JOB, Tag.BATCH_JOB, Tag.GPU_SLOT)
        tags = {k: v for k, v in earlier.raw["tags"].items() if not k.startswith("mlflow.") and k not in own}
        mine = {k: v for k, v in job.tags.items() if k in own}
        mine[Tag.KERNEL_SOURCE_HASH] = job.tags[Tag.KERNEL_SOURCE_HASH]  # the same kernel, maybe under its older hash
        run_id = tracker.start_run(job.sweep.experiment_id, job.run_name(),
                                   {**tags, **mine, Tag.RESUMED_FROM: earlier.run_id}, parent_id=job.sweep.parent_run_id)
        tracker.log(run_id, params=earlier.raw["params"], metrics=earlier.raw["metrics"])
        tracker.end(run_id, "FINISHED")
    log.info(f"[{job.number}/{job.total or '?'}] {job.setup.label()} → {earlier.latency_ms:.3f} ms, resumed: measured "
             f"alike in run {earlier.run_id} (resume=false measures it again)")
    return earlier.latency_ms


def _measure(job: _Job) -> tuple[str, str, dict[str, float]]:
    from convtune import kernels
    from convtune.measure import one_config
    from convtune.measure.ceilings import apply_cache
    from convtune.measure.metrics import gpu_spec

    s = job.setup
    kernels.validate_meta(s.meta)
    kernels.validate_precision(s.precision)
    spec = None
    if not s.interpreted:
        spec = apply_cache(gpu_spec(s.gpu), s.gpu)
        if spec is None:
            log.warning(f"GPU '{s.gpu}' is not in convtune.measure.metrics.GPU_SPECS: pct_peak_* omitted")
    m = one_config.measure(s.problem, s.variant, s.meta, s.precision, tolerance(s.precision, s.problem.dtype), s.cfg.seed,
                           s.timing, s.device, spec, with_cudnn=s.cfg.bench.cudnn_baseline, check=s.check)
    job.tags.update(m.tags)
    if enum_value(s.cfg.profile) == "ncu" and m.status == Status.OK:
        m.metrics.update(_ncu(job))
    return m.status, m.message, m.metrics


def _ncu(job: _Job) -> dict[str, float]:
    """NCU counters for one extra launch in a child process; a missing or refused ncu is a tag, not a failure."""
    from convtune.measure import ncu

    s = job.setup
    problem = s.problem
    if s.interpreted:
        counters, status = {}, "ncu needs a GPU: no NCU counters under the interpreter"
    else:
        spec = {**{k: getattr(problem, k) for k in problem.__dataclass_fields__}, "stride": list(problem.stride),
                "padding": list(problem.padding), "dilation": list(problem.dilation)}
        counters, status = ncu.profile({"problem": spec, "kernel": s.variant.name, "meta": s.meta.as_dict(),
                                        "precision": s.precision, "seed": s.cfg.seed,
                                        "llvm_opt": job.tags.get(Tag.LLVM_OPT)})
    job.tags[Tag.NCU_STATUS] = status
    if not counters:
        log.info(status)
    out = {ncu.metric_name(k): v for k, v in counters.items()}  # Metric.NCU_PREFIX + the counter
    moved = counters.get("dram__bytes_read.sum", 0) + counters.get("dram__bytes_write.sum", 0)
    if moved:
        out[Metric.NCU_ARITHMETIC_INTENSITY] = problem.flops / moved
        out[Metric.NCU_DRAM_BYTES_OVER_MIN] = moved / problem.min_bytes
    return out


def _record(tracker: Tracker, run_id: str, job: _Job, metrics: dict[str, float], status: str,
            error_type: Optional[str], message: str) -> None:
    tags = {**job.tags, Tag.STATUS: status}
    if error_type:
        tags.update({Tag.ERROR_TYPE: error_type, Tag.ERROR_MESSAGE: message})
    tracker.log(run_id, params=job.params, metrics=metrics, tags=tags)
    tracker.end(run_id, Status.mlflow(status))
