"""A sweep's state between processes: `convtune_sweep.json` in the sweep folder, created exclusively by the sweep's
callback (convtune.sweep) and read by its jobs and launchers (convtune.app, convtune.launch) to nest their runs under
the parent; and the record of a job that ended without closing its own run. Launchers import this, never sweep.py."""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Optional

from convtune import interrupts
from convtune.record import Status, Tag
from convtune.track.store import Tracker

STATE_FILE = "convtune_sweep.json"

# The launching process names its sweep here (the parent run's id) before any job starts; jobs inherit it (the same
# process, a child process, or a SLURM task's exported environment) and refuse a state file of another sweep.
SWEEP_ENV = "CONVTUNE_SWEEP_PARENT"


class SweepCrossed(ValueError):
    """A sweep folder holds another sweep's state: two sweeps were given one folder."""


@dataclass
class SweepState:
    parent_run_id: str
    experiment_id: str
    experiment_name: str
    tracking_uri: str
    total_jobs: Optional[int]
    varied: list[str] = field(default_factory=list)  # the keys whose value differs between jobs (run names)
    device: Optional[str] = None  # cuda | interpreter: what every job must run on (the experiment is for it)

    def save(self, sweep_dir: Path) -> None:
        """Write the state atomically (temp file + rename) over this sweep's own claim or state."""
        sweep_dir.mkdir(parents=True, exist_ok=True)
        tmp = sweep_dir / f".{STATE_FILE}.{os.getpid()}.tmp"
        tmp.write_text(json.dumps(asdict(self), indent=1))
        os.replace(tmp, sweep_dir / STATE_FILE)

    @staticmethod
    def load(sweep_dir: Path) -> Optional["SweepState"]:
        """The state in `sweep_dir` (None where there is none, or only a claim that no sweep has filled yet)."""
        f = sweep_dir / STATE_FILE
        try:
            data = json.loads(f.read_text())
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as e:
            raise SweepCrossed(f"sweep state {f} cannot be read ({e}); give the sweep a folder of its own "
                               "(hydra.sweep.dir=...)") from None
        return SweepState(**data) if data.get("parent_run_id") else None

    @staticmethod
    def of_this_sweep(sweep_dir: Path) -> Optional["SweepState"]:
        """load, refusing (SweepCrossed) a state that is not this process's sweep (SWEEP_ENV, where set)."""
        state = SweepState.load(sweep_dir)
        mine = os.environ.get(SWEEP_ENV)
        if state is not None and mine and state.parent_run_id != mine:
            raise SweepCrossed(f"sweep folder {sweep_dir} holds sweep {state.parent_run_id}'s state, not this job's "
                               f"sweep {mine}: two sweeps share one folder; give each its own hydra.sweep.dir")
        return state


def claim_folder(sweep_dir: Path, still_running: Callable[[SweepState], bool]) -> None:
    """Create this sweep's state file exclusively (an empty claim, filled once the parent run exists). A state
    left by a sweep that has ended is replaced; one whose sweep `still_running` says is running is refused."""
    sweep_dir.mkdir(parents=True, exist_ok=True)
    f = sweep_dir / STATE_FILE
    for _ in range(2):
        try:
            os.close(os.open(f, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))
            f.write_text("{}")
            return
        except FileExistsError:
            try:
                old = SweepState.load(sweep_dir)
            except SweepCrossed:
                old = None
            if old is None and f.exists() and time.time() - f.stat().st_mtime < CLAIM_GRACE_S:
                break  # another sweep claimed it a moment ago and has not filled it yet
            if old is not None and still_running(old):
                raise SweepCrossed(f"sweep folder {sweep_dir} is in use by sweep {old.parent_run_id}, still running: "
                                   "give this sweep another hydra.sweep.dir (the default folder is unique per "
                                   "sweep)") from None
            f.unlink(missing_ok=True)  # an ended sweep's state (a rerun into the same folder): replaced
    raise SweepCrossed(f"sweep folder {sweep_dir} was claimed by another sweep starting at the same moment: give "
                       "this sweep another hydra.sweep.dir (the default folder is unique per sweep)")


CLAIM_GRACE_S = 60  # an empty claim younger than this belongs to a sweep still starting (its parent run ~1 s away)


def close_lost_job(state: SweepState, number: int, overrides: list[str], slot: Optional[str], status: str,
                   error_type: str, message: str, extra_tags: Optional[dict[str, str]] = None,
                   overrule: bool = False) -> str:
    """Record a job that ended without closing its run (gpus launcher: a timeout, a crash, an interrupt; slurm:
    a task the scheduler ended): its RUNNING run (found by the job's number, Tag.JOB) is closed with `status` and
    the reason; a job that ended before making its run gets one, named by its overrides, so that nothing of the
    sweep goes missing. `overrule`: a run the job closed itself, other than ok, gets `status` and the reason too (a
    SLURM task that scancel or its time limit ended closes its run KILLED on the scheduler's SIGTERM; the run says
    the scheduler's state instead). Returns the run's id."""
    tracker = Tracker(state.tracking_uri)
    mine = [r for r in tracker.children(state.parent_run_id) if r["tags"].get(Tag.JOB) == str(number)]
    tags = {Tag.STATUS: status, Tag.ERROR_TYPE: error_type, Tag.ERROR_MESSAGE: message, **(extra_tags or {})}
    with interrupts.deferred():
        for r in mine:
            if r["status"] == "RUNNING" or (overrule and r["tags"].get(Tag.STATUS) != Status.OK):
                tracker.log(r["run_id"], tags=tags)
                tracker.end(r["run_id"], Status.mlflow(status))
                return str(r["run_id"])
        if mine:  # the job closed its own run before its process ended
            return str(mine[0]["run_id"])
        name = " ".join(o for o in overrides if o.split("=", 1)[0].lstrip("+~") in state.varied) or f"job {number}"
        run_id = tracker.start_run(state.experiment_id, name, {**tags, Tag.OVERRIDES: " ".join(overrides),
                                                               Tag.JOB: str(number),
                                                               **({Tag.GPU_SLOT: slot} if slot is not None else {})},
                                   parent_id=state.parent_run_id)
        tracker.end(run_id, Status.mlflow(status))
    return run_id
