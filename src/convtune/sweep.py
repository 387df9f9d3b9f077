"""A multirun's parent MLflow run: opened by a Hydra callback in the launching process, closed with a summary.

The callback creates the SQLite database and the experiment once, before any job starts (several processes
creating a fresh SQLite store at once corrupt it), opens the parent run and leaves `convtune_sweep.json` in
the sweep folder; each job reads it to nest its run under the parent and to print `[i/total]`.
"""

from __future__ import annotations

import os
import shlex
import socket
import sys
import time
from pathlib import Path
from typing import Any, Optional

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

from convtune import interrupts
from convtune.errors import ConfigError
from convtune.device import git_tags, planned_device, resolve_device
from convtune.resolve import Target, experiment_name, refuse_early
from convtune.track import summary
from convtune.record import Metric, Param, RunView, Status, Tag
from convtune.sweep_state import SWEEP_ENV, SweepState, claim_folder
from convtune.track import dashboard
from convtune.track.store import UI_DEFAULT, Tracker, outer_run, resolve_uri, say_reaped, ui_link

# Launchers that run every job on this host, in this process's environment: the device this process resolves
# is the jobs' device. Any other (hydra/launcher=slurm and slurm_local through submitit, Ray, RQ) runs its jobs
# where this process cannot look, maybe from a login node without a GPU: the sweep is then for the device
# planned from the config (setup.planned_device), and each job checks it on its own node.
LOCAL_LAUNCHERS = (".BasicLauncher", ".GpusLauncher", ".JoblibLauncher")


def jobs_decide_device(launcher: Any) -> bool:
    return not str(launcher.get("_target_", "")).endswith(LOCAL_LAUNCHERS)


def planned_jobs(config: DictConfig) -> Optional[list[list[str]]]:
    """The jobs the sweeper will launch, for the basic and the convtune sweeper; None for any other."""
    from hydra_plugins.convtune_sweeper.sweeper import plan_jobs

    sweeper = config.hydra.sweeper
    target = str(sweeper.get("_target_", ""))
    if not target.endswith(("BasicSweeper", "ConvtuneSweeper")) or sweeper.get("configs_from"):
        return None  # another sweeper, or configs the sweeper derives itself (it reports the count: on_planned)
    params = OmegaConf.to_container(sweeper.params) if sweeper.get("params") else None
    configs = OmegaConf.to_container(sweeper.configs) if sweeper.get("configs") is not None else None
    return plan_jobs(params, configs, list(config.hydra.overrides.task))  # type: ignore[arg-type]


def _search_space(config: DictConfig) -> Optional[Any]:
    """hydra/sweeper=search's space (search.Space), its keys checked; None for any other sweeper."""
    sweeper = config.hydra.sweeper
    if not str(sweeper.get("_target_", "")).endswith(".SearchSweeper"):
        return None
    from convtune.launch.search import check_settings

    return check_settings(sweeper, list(config.hydra.overrides.task))


def check_sweep_values(config: DictConfig, jobs: Optional[list[list[str]]]) -> None:
    """Compose the config with every distinct override of the planned jobs, so that a value of the wrong type
    (BLOCK_M=16,abc) is refused in one line before any job, instead of ending the sweep at that job. A set of
    overrides that is a whole job (each job of a one-key sweep, the diagonal of a product) is composed as that job and
    recorded, so that the sweeper does not compose it again (sweeper.COMPOSED, this sweep's alone)."""
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra_plugins.convtune_sweeper.sweeper import COMPOSED, plan_jobs

    COMPOSED.clear()  # what another sweep of this process composed was composed from its own config
    hydra = GlobalHydra.instance().hydra if GlobalHydra.instance().is_initialized() else None
    if not jobs or hydra is None:
        return
    # An override given as a single value on the command line is in the config Hydra composed to start the sweep
    # (it would have failed there); composing it again costs ~0.1 s each, for nothing. Written as the jobs write it.
    single = [o.input_line for o in OverridesParser.create().parse_overrides(list(config.hydra.overrides.task))
              if not o.is_sweep_override()]
    composed = set(plan_jobs(None, None, single)[0]) if single else set()
    by_key: dict[str, list[str]] = {}
    for override in sorted({o for job in jobs for o in job} - composed):
        by_key.setdefault(override.split("=", 1)[0], []).append(override)
    # One compose per column (the i-th value of every key together): a sweep of k keys × v values composes v times,
    # not k·v. Only a column that fails is composed again one override at a time, to name the value at fault.
    columns = [[vals[i] for vals in by_key.values() if i < len(vals)] for i in range(max(map(len, by_key.values()), default=0))]
    whole = {frozenset(job): job for job in jobs}
    for column in columns:
        job = whole.get(frozenset(composed.union(column)))
        if _compose_error(hydra, config, job if job is not None else column) is None:
            if job is not None:
                COMPOSED.add(frozenset(job))
            continue
        for override in column:
            cause = _compose_error(hydra, config, [override])
            if cause is not None:
                raise ConfigError(override.split("=", 1)[0].lstrip("+~"), override.split("=", 1)[-1],
                                  f"the sweep cannot run it ({cause})")


def _compose_error(hydra: Any, config: DictConfig, overrides: list[str]) -> Optional[str]:
    """None if the config composes with `overrides`, else the first line of Hydra's reason."""
    from hydra.errors import ConfigCompositionException

    try:
        hydra.config_loader.load_sweep_config(config, overrides)
    except ConfigCompositionException as e:
        return (str(e.__cause__ or e).strip().splitlines() or ["Hydra could not compose it"])[0]
    return None


def varied_keys(jobs: list[list[str]]) -> list[str]:
    """The keys whose value differs between the jobs, in the order they first appear."""
    values: dict[str, set[str]] = {}
    for job in jobs:
        for o in job:
            key, _, value = o.partition("=")
            values.setdefault(key.lstrip("+~"), set()).add(value)
    return [k for k, v in values.items() if len(v) > 1]


def browse_hint(uri: str, experiment_id: str, parent_run_id: Optional[str] = None) -> str:
    """Where to see the sweep: its parent run's page, the dashboard (track/dashboard.py), and on a second line its
    runs table sorted by latency; without a parent, the experiment's runs in the model-training view."""
    server = uri.startswith(("http://", "https://"))
    base = uri.rstrip("/") if server else UI_DEFAULT
    page = dashboard.run_link(experiment_id, parent_run_id, base + "/") if parent_run_id else ui_link(experiment_id, base)
    first = f"browse: {page}" if server else f"browse: mlflow ui --backend-store-uri {shlex.quote(uri)}   then {page}"
    if parent_run_id is None:
        return first
    return (first + f"\nruns by latency: {dashboard.runs_by_latency(experiment_id, parent_run_id, base + '/')}"
            f"\n  ({dashboard.PICK_COLUMNS})")


def sweep_run_name(task_overrides: list[str], now: Optional[float] = None) -> str:
    """The parent run's name: what the sweep varies, then when it started ("num_warps=2,4 BLOCK_M=48,32 · 11-22
    09:57"). The MLflow UI's runs table shows ~18 characters of a name; "sweep 2026-11-22 0…" told no two sweeps
    of a day apart."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parsed = OverridesParser.create().parse_overrides(task_overrides)
    # a problem defined on the command line (tune_model.py's shapes) is named first: the sweeps nested under a
    # model's run differ by it alone
    named = [str(o.value()) for o in parsed if o.key_or_group == "problem.name"]
    varied = [o.input_line for o in parsed if o.is_sweep_override() or o.key_or_group.lstrip("+") == "experiment"]
    return f"{' '.join(named + varied) or 'sweep'} · {time.strftime('%m-%d %H:%M', time.localtime(now))}"


def record_total_jobs(config: DictConfig, total: int) -> None:
    """hydra.sweeper.on_planned: the job count of a sweep whose configs were derived when it started (or of a
    search, its budget): in the state the jobs read ([i/total]) and on the parent run, which was tagged "?"."""
    state = SweepState.of_this_sweep(Path(config.hydra.sweep.dir))
    if state is not None:
        state.total_jobs = total
        state.save(Path(config.hydra.sweep.dir))
        with interrupts.deferred():
            Tracker(state.tracking_uri).log(state.parent_run_id, tags={Tag.TOTAL_JOBS: total})


def _log_plots(tracker: Tracker, state: SweepState, runs: list[dict[str, Any]]) -> list[str]:
    """latency.png, importance.png (latency against each swept parameter) and roofline.png on the parent run (one
    problem per sweep; a suite gets none); their names."""
    from convtune.track import plots

    if len({RunView(r).problem for r in runs}) != 1:
        return []
    first = RunView(runs[0])
    title = f"{first.problem} · {first.tag(Tag.DEVICE, '?')} · {first.param(Param.PRECISION)}"
    logged = []
    for name, fig in (("latency.png", plots.latency_by_config(runs, title)),
                      ("importance.png", plots.latency_by_parameter(runs, title)),  # latency against each knob
                      ("roofline.png", plots.roofline(runs, title))):
        if fig is not None:
            tracker.log_figure(state.parent_run_id, fig, name)
            plots.plt.close(fig)
            logged.append(name)
    return logged


def finalize(state: SweepState, status: str) -> str:
    """Write the summary table to the parent run, end it with `status`, and return the table. A signal that
    arrives meanwhile waits until the parent is closed, and then closes it KILLED."""
    with interrupts.deferred():
        return _finalize(state, status)


def _finalize(state: SweepState, status: str) -> str:
    tracker = Tracker(state.tracking_uri)
    runs = tracker.children(state.parent_run_id)
    table = summary.markdown(runs)
    c = summary.counts(runs)
    c["resumed"] = sum(1 for r in runs if RunView(r).tag(Tag.RESUMED_FROM))
    best = summary.ranked(runs)[0] if c[Status.OK] else None
    tracker.log_text(state.parent_run_id, table + "\n", "summary.md")
    plotted = _log_plots(tracker, state, runs)
    # the parent run's Overview is the sweep's dashboard (track/dashboard.py); the winner's run is tagged
    interpreted = any(RunView(r).tag(Tag.DEVICE) == "interpreter" for r in runs)
    if interpreted:
        table += "\n" + summary.INTERPRETER_NOTE
    note, winner = dashboard.tags(runs, state.experiment_id, state.parent_run_id, interpreted, plotted)
    tracker.log(state.parent_run_id, tags=note)
    if winner is not None:
        tracker.log(winner, tags={dashboard.WINNER: "true"})
    if len({RunView(r).problem for r in runs}) > 1:
        by_problem = summary.per_problem(runs)
        tracker.log_text(state.parent_run_id, by_problem + "\n", "per_problem.md")
        table += "\n\n" + by_problem
    interrupts.checkpoint("summary")
    if interrupts.pending() is not None:
        status = "KILLED"
    tracker.log(state.parent_run_id,
                metrics={f"{Metric.N_PREFIX}{k}": float(v) for k, v in c.items()}
                | ({Metric.BEST_LATENCY_MS: best.latency_ms} if best else {}),
                tags={Tag.STATUS: status.lower(), Tag.SUMMARY_ROWS: str(len(runs))}
                | ({Tag.BEST_RUN_ID: best.run_id, Tag.BEST_CONFIG: best.config_label()} if best else {}))
    tracker.end(state.parent_run_id, status)
    if c["resumed"]:
        table += (f"\n\n{c['resumed']} of {len(runs)} configuration(s) resumed: measured alike before, not measured "
                  "again (resume=false measures them again)")
    return table


def _still_running(state: SweepState) -> bool:
    """Whether the sweep that left `state` is still running: its parent run is RUNNING in its store and, where it
    was started on this host, its process is alive. A store that is gone or cannot be read says no."""
    from convtune.track.store import process_alive

    if state.tracking_uri.startswith("sqlite:///") and not Path(state.tracking_uri[len("sqlite:///"):]).exists():
        return False
    try:
        parent = Tracker(state.tracking_uri).get(state.parent_run_id)
    except Exception:  # noqa: BLE001 - a store that is gone, unreachable or damaged holds no running sweep we know of
        return False
    tags = parent["tags"]
    here = tags.get(Tag.HOST) == socket.gethostname()
    return parent["status"] == "RUNNING" and (not here or process_alive(tags.get(Tag.PROCESS, "")))


def check_sweep_dir(sweep_dir: Path) -> None:
    """The sweep folder can be made and written (ConfigError in one line otherwise): Hydra's sweeper makes it after
    this callback, and a file or a read-only folder there was a traceback of 20 lines."""
    import tempfile

    try:
        sweep_dir.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(dir=sweep_dir, prefix=".convtune-check-")
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        raise ConfigError("hydra.sweep.dir", str(sweep_dir), f"a folder this process can make and write in "
                          f"({e.strerror or type(e).__name__}: {e.filename or sweep_dir})") from None


class SweepCallback(Callback):
    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        try:
            check_sweep_dir(Path(config.hydra.sweep.dir))
            launcher = config.hydra.launcher
            elsewhere = jobs_decide_device(launcher)
            target = refuse_early(config, planned_device(config) if elsewhere else None)
            if str(launcher.get("_target_", "")).endswith(".GpusLauncher"):  # before the parent run exists
                from convtune.launch.pool import check_settings
                check_settings(launcher.get("gpus"), launcher.get("timeout_s"))
            if str(launcher.get("_target_", "")).endswith(".SlurmLocalLauncher"):
                from convtune.launch import slurm
                slurm.check_settings(launcher.get("parallelism"))
            jobs = planned_jobs(config)
            space = _search_space(config)  # hydra/sweeper=search: jobs are asked for as it goes
            check_sweep_values(config, jobs if space is None else space.columns())
            if launcher.get("dry_run"):
                self._dry_run(target, jobs, space)
                return
            if elsewhere and config.promote.after_sweep and resolve_device("auto") != target.device:
                raise ConfigError("promote.after_sweep", True, f"false here: promote times the contenders again on "
                                  f"{target.device}, and this machine has none; run promote.py on a node of the "
                                  "sweep's GPU after it ends")
            self._start(config, target, jobs, varied_keys(jobs or []) if space is None else list(space.choices))
            if elsewhere:
                print(f"device: {target.device} in every job, checked on the job's own node (the launcher runs "
                      "them elsewhere)", flush=True)
        except ValueError as e:  # Hydra only warns about a callback's exception and runs the jobs anyway
            print(f"error: {e}", file=sys.stderr, flush=True)
            raise SystemExit(2) from None

    @staticmethod
    def _dry_run(target: Target, jobs: Optional[list[list[str]]], space: Any) -> None:
        """hydra.launcher.dry_run=true: the launcher shows what it would submit; no parent run, nothing recorded."""
        if space is not None or jobs is None:
            raise ConfigError("hydra.launcher.dry_run", True, "false with this sweeper: the batch script of a "
                              "grid is known in advance, a search's batches are asked for as it goes")
        print(f"dry run: {len(jobs)} jobs of {target.problem.name} on {target.device}; nothing is submitted or "
              "recorded", flush=True)

    def _start(self, config: DictConfig, target: Target, jobs: Optional[list[list[str]]], varied: list[str]) -> None:
        hc = config.hydra
        problem_swept = jobs is not None and len({o for j in jobs for o in j if o.startswith("problem=")}) > 1
        uri = resolve_uri(config.tracking.uri, Path(hc.runtime.cwd))
        name = experiment_name(config, target.problem.name, target.device, problem_swept)
        tags = {Tag.STATUS: Status.RUNNING, Tag.SWEEP_DIR: str(hc.sweep.dir), Tag.OVERRIDES: " ".join(hc.overrides.task),
                Tag.TOTAL_JOBS: "?" if jobs is None else len(jobs), **git_tags()}
        with interrupts.deferred():  # the store's creation and the parent's registration are never cut
            tracker = Tracker(uri)  # creates the SQLite database, once, here
            say_reaped(tracker.reap_orphans())
            exp_id = tracker.experiment_id(name)
            nest_under = outer_run(tracker, config.tracking.get("parent_run"), exp_id)
            claim_folder(Path(hc.sweep.dir), _still_running)  # before the parent: a refused sweep records nothing
            parent = tracker.start_run(exp_id, run_name=sweep_run_name(list(hc.overrides.task)), tags=tags,
                                       parent_id=nest_under)
            state = SweepState(parent, exp_id, name, uri, None if jobs is None else len(jobs), varied, target.device)
            state.save(Path(hc.sweep.dir))
            os.environ[SWEEP_ENV] = parent  # the jobs' check that the folder's state is their sweep's
            self._parent = parent
            self._on_kill = interrupts.on_interrupt(
                lambda sig: finalize(state,
                                     "FAILED" if sig == interrupts.ABNORMAL_EXIT else "KILLED"))
        tracker.log_text(parent, OmegaConf.to_yaml(config, resolve=False), "multirun.yaml")
        print(f"sweep: {'?' if jobs is None else len(jobs)} jobs → MLflow experiment '{name}', parent run {parent}"
              f" ({uri})", flush=True)
        if target.notice:
            print(target.notice, flush=True)
        interrupts.checkpoint("sweep_started")

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        state = SweepState.of_this_sweep(Path(config.hydra.sweep.dir))
        if state is not None and state.parent_run_id == getattr(self, "_parent", None):
            with interrupts.deferred():
                table = finalize(state, "FINISHED")
                if getattr(self, "_on_kill", None) is not None:
                    self._on_kill.cancel()
            print(table, flush=True)
            print(browse_hint(state.tracking_uri, state.experiment_id, state.parent_run_id), flush=True)
        if config.promote.after_sweep and not config.hydra.launcher.get("dry_run"):
            from convtune.tune.promote import run_promote

            run_promote(config)
