"""SIGINT/SIGTERM at named moments of a real `python run.py` sweep or run: nothing is left RUNNING.

Deterministic: the process is held at a named point (convtune.interrupts.checkpoint, through
CONVTUNE_PAUSE_AT) and the signal is sent only once it has written the marker file, never after a sleep.
"""

import os
import signal
import subprocess
import sys
import time

import pytest
from mlflow.tracking import MlflowClient

from convtune import interrupts
from tests import preloaded
from tests.conftest import ROOT


def start_held(tmp_path, store, point, *args):
    """Start run.py held at `point`; return the process once it is there."""
    marker = tmp_path / "paused"
    cmd = [sys.executable, "run.py", *args, "problem=tiny", "bench=fast", f"tracking.uri={store}",
           f"pins_file={tmp_path / 'pins.yaml'}", f"hydra.run.dir={tmp_path / 'out'}", f"hydra.sweep.dir={tmp_path / 'sweep'}"]
    env = {**os.environ, "TRITON_INTERPRET": "1", "CONVTUNE_PAUSE_AT": point, "CONVTUNE_PAUSE_FILE": str(marker)}
    proc = preloaded.popen(cmd, cwd=ROOT, env=env)
    deadline = time.monotonic() + 300
    while not marker.exists():  # polling a file the process writes: a wait, not a guess about timing
        if proc.poll() is not None or time.monotonic() > deadline:
            out, err = proc.communicate(timeout=60)
            pytest.fail(f"never reached {point!r} (rc {proc.returncode}):\n{out}\n{err}")
        time.sleep(0.02)
    return proc


def all_runs(store):
    c = MlflowClient(store)
    exp = c.get_experiment_by_name("tiny [interpreter]")
    return c, (c.search_runs([exp.experiment_id], max_results=1000) if exp else [])


# point (occurrence) → (children FINISHED, children KILLED) once the signal has been handled, sweep of 2 jobs
SWEEP_POINTS = {
    "sweep_started": (0, 0),   # the parent exists, no child yet
    "job_running": (0, 1),     # the first child is measuring
    "job_finished:1": (1, 0),  # between the two jobs, in Hydra's own code
    "job_running:2": (1, 1),   # the second child is measuring
    "summary": (2, 0),         # during the final summary
}


# SIGINT at every point but the second job's, where SIGTERM (the same handler) comes instead: each signal once while
# a child is open
CASES = [(p, signal.SIGINT) for p in SWEEP_POINTS if p != "job_running:2"] + [("job_running:2", signal.SIGTERM)]


@pytest.mark.slow
@pytest.mark.parametrize("point,sig", CASES, ids=[f"{p}-{s.name}" for p, s in CASES])
def test_a_signal_anywhere_in_a_sweep_leaves_nothing_running(tmp_path, store, point, sig):
    proc = start_held(tmp_path, store, point, "-m", "num_warps=2,4")
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 128 + sig, (out, err)
    assert "Traceback" not in err and "Traceback" not in out
    assert err.strip().splitlines()[-1] == f"interrupted ({sig.name}): finished runs kept, open runs marked KILLED"
    c, runs = all_runs(store)
    assert "RUNNING" not in [r.info.status for r in runs]
    (parent,) = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    kids = [r for r in runs if "mlflow.parentRunId" in r.data.tags]
    finished, killed = SWEEP_POINTS[point]
    assert [r.info.status for r in kids].count("FINISHED") == finished
    assert [r.info.status for r in kids].count("KILLED") == killed and len(kids) == finished + killed
    assert all(r.data.tags["status"] == "killed" and r.data.tags["error.message"] == f"interrupted ({sig.name})"
               for r in kids if r.info.status == "KILLED")
    assert parent.info.status == "KILLED" and parent.data.tags["status"] == "killed"
    assert parent.data.metrics["n_ok"] == finished
    assert "summary.md" in [a.path for a in c.list_artifacts(parent.info.run_id)]


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGINT], ids=["SIGINT"])  # SIGTERM, the same handler: in a sweep above
def test_a_signal_during_a_single_run_marks_it_killed(tmp_path, store, sig):
    proc = start_held(tmp_path, store, "job_running")
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 128 + sig and "Traceback" not in err, (out, err)
    _, (run,) = all_runs(store)
    assert run.info.status == "KILLED" and run.data.tags["status"] == "killed"


def test_a_signal_inside_a_deferred_section_waits_for_its_end():
    """In-process: the handler is ours, the section completes, then Interrupted is raised once."""
    old = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    done = []
    try:
        interrupts.install()
        interrupts._guarded = True
        with pytest.raises(interrupts.Interrupted) as e:
            with interrupts.deferred():
                os.kill(os.getpid(), signal.SIGTERM)
                assert interrupts.pending() == signal.SIGTERM
                done.append("section finished")
        assert done == ["section finished"] and e.value.exit_code == 143
        assert interrupts.pending() is None
        run = interrupts.on_interrupt(lambda sig: None)  # something open (with nothing open, the process just ends)
        with pytest.raises(interrupts.Interrupted):  # outside a section: at once
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(5)
        run.cancel()
    finally:
        interrupts._guarded = False
        for s, h in old.items():
            signal.signal(s, h)


def test_cleanups_run_newest_first_and_each_once():
    seen = []
    a = interrupts.on_interrupt(lambda sig: seen.append(("parent", sig)))
    interrupts.on_interrupt(lambda sig: seen.append(("child", sig)))
    gone = interrupts.on_interrupt(lambda sig: seen.append(("cancelled", sig)))
    gone.cancel()
    try:
        assert interrupts.close_all("SIGINT") == [] and seen == [("child", "SIGINT"), ("parent", "SIGINT")]
        assert interrupts.close_all("SIGINT") == [] and len(seen) == 2
    finally:
        interrupts._closing = False
        a.cancel()


@pytest.mark.slow
def test_after_kill_9_the_next_run_marks_the_dead_processes_runs_killed(tmp_path, store, run_here):
    proc = start_held(tmp_path, store, "job_running", "-m", "num_warps=2,4")
    proc.kill()  # SIGKILL: no handler runs, the parent and the first child stay RUNNING in the store
    proc.communicate(timeout=60)
    _, runs = all_runs(store)
    assert sorted(r.info.status for r in runs) == ["RUNNING", "RUNNING"]
    status, said = run_here("problem=tiny", "bench=fast")  # the next run, in this process: the store is the subject
    assert status == 0, said
    assert "marked 2 run(s) KILLED whose process on this host is gone (kill -9 or a crash)" in said
    _, runs = all_runs(store)
    killed = [x for x in runs if x.info.status == "KILLED"]
    assert len(killed) == 2 and len(runs) == 3 and all(x.data.tags["status"] == "killed" for x in killed)
    assert all(x.data.tags["error.type"] == "ProcessGone" and str(proc.pid) in x.data.tags["error.message"] for x in killed)


def test_a_process_is_alive_only_while_its_pid_and_start_time_match():
    from convtune.track.store import process_alive, _start_ticks, this_process

    me = this_process()["process"]
    assert process_alive(me)
    pid, _, start = me.partition(":")
    if start:  # /proc is there: a reused pid with another start time is not this run's process
        assert not process_alive(f"{pid}:{int(start) + 1}")
    gone = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    started = _start_ticks(gone.pid) or ""  # read while it runs: a later process reusing the pid differs here
    gone.stdin.close()
    gone.wait()
    assert not process_alive(f"{gone.pid}:{started}")


def test_an_error_that_ends_the_process_closes_what_is_open_as_failed():
    told = []
    old = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        interrupts.on_interrupt(told.append)
        with pytest.raises(SystemExit):
            interrupts.guard(lambda: sys.exit(1))  # as Hydra ends a sweep whose job config cannot be composed
        assert told == [interrupts.ABNORMAL_EXIT]
        later = interrupts.on_interrupt(told.append)
        with pytest.raises(SystemExit):
            interrupts.guard(lambda: sys.exit(0))  # a normal end leaves registrations to their owners
        assert told == [interrupts.ABNORMAL_EXIT]
        later.cancel()
    finally:
        interrupts._guarded = interrupts._closing = False
        for s, h in old.items():
            signal.signal(s, h)


def exit_now_in_a_process(body):
    code = f"import atexit, sys, threading, time\nfrom convtune import interrupts\n{body}"
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("code,status,err", [(None, 0, ""), (0, 0, ""), (3, 3, ""), ("error: one line", 1, "error: one line\n")])
def test_exit_now_ends_as_sys_exit_would_with_atexit_handlers_run_and_output_flushed(code, status, err):
    r = exit_now_in_a_process(f"atexit.register(lambda: print('atexit ran'))\nprint('unflushed', end=' ')\n"
                              f"interrupts.exit_now({code!r})\nprint('never')")
    assert (r.returncode, r.stdout, r.stderr) == (status, "unflushed atexit ran\n", err)


def test_exit_now_lets_a_running_thread_finish():
    r = exit_now_in_a_process("t = threading.Thread(target=lambda: (time.sleep(0.3), print('thread done')))\n"
                              "t.start()\ninterrupts.exit_now(4)")
    assert (r.returncode, r.stdout) == (4, "thread done\n")


def test_a_signal_while_nothing_is_open_ends_the_process_there_without_raising(tmp_path):
    """Raising from the handler while torch's import ran Python from C++ aborted the process (rc -6); with
    nothing to close there is nothing to unwind, so the handler ends the process itself."""
    marker = tmp_path / "ready"
    code = ("import sys, time\nfrom convtune import interrupts\n"
            "def main():\n    open(sys.argv[1], 'w').close()\n    time.sleep(60)\n    print('slept')\n"
            "print('started', flush=False)\ninterrupts.main_then_exit(main)\n")
    proc = subprocess.Popen([sys.executable, "-c", code, str(marker)], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    while not marker.exists():  # the process writes it once main runs under the guard
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.02)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=60)
    assert (proc.returncode, out, err) == (143, "started\n", "interrupted (SIGTERM): nothing was open\n")
