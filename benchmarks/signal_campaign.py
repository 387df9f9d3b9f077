"""SIGINT / SIGTERM at random moments of real sweeps: is anything ever left RUNNING?

    python benchmarks/signal_campaign.py --sigint 30 --sigterm 14 --seed 0 [--out campaign.jsonl]

Each trial starts `python run.py -m problem=tiny bench=fast num_warps=2,4` (Triton interpreter) on a store of
its own, sends the signal after a delay drawn uniformly over the length of an undisturbed sweep (timed first,
here), waits for the process, and reads the store back. Every trial must end 128+signal with one line, no
traceback and no run RUNNING: with runs open, the parent and the interrupted child KILLED and finished children
FINISHED; before any run exists (still importing, or guarded with nothing open) the process just ends. A
signal that lands after the process ended is counted apart (not a test of the handler). The unit tests deliver
signals at named points (tests/test_interrupts.py); this is the random complement, not a test: it depends on
timing by design.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from mlflow.tracking import MlflowClient

ROOT = Path(__file__).resolve().parents[1]


def sweep(workdir: Path, store: str) -> list[str]:
    return [sys.executable, "run.py", "-m", "problem=tiny", "bench=fast", "num_warps=2,4", f"tracking.uri={store}",
            f"pins_file={workdir / 'pins.yaml'}", f"hydra.sweep.dir={workdir / 'sweep'}"]


def fresh_store(template: Path, workdir: Path) -> str:
    (workdir / "mlruns").mkdir(parents=True)
    shutil.copyfile(template, workdir / "mlruns" / "mlflow.db")
    return f"sqlite:///{workdir / 'mlruns' / 'mlflow.db'}"


def statuses(store: str) -> list[str]:
    c = MlflowClient(store)
    return [r.info.status for e in c.search_experiments() for r in c.search_runs([e.experiment_id], max_results=100)]


def trial(template: Path, sig: signal.Signals, delay: float) -> dict:
    with tempfile.TemporaryDirectory() as d:
        workdir = Path(d)
        store = fresh_store(template, workdir)
        env = {**os.environ, "TRITON_INTERPRET": "1"}
        proc = subprocess.Popen(sweep(workdir, store), cwd=ROOT, env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        time.sleep(delay)
        sent = proc.poll() is None
        if sent:
            proc.send_signal(sig)
        out, err = proc.communicate(timeout=300)
        runs = statuses(store)
    last = (err.strip().splitlines() or [""])[-1]
    if not sent:
        outcome = "ended_before_signal"
    elif proc.returncode != 128 + sig or "Traceback" in out + err or "RUNNING" in runs:
        outcome = "BAD"
    elif last == f"interrupted ({sig.name}) before anything started":
        outcome = "before_start" if not runs else "BAD"  # still importing, before the entry point's guard
    elif last == f"interrupted ({sig.name}): nothing was open":
        outcome = "nothing_open"  # guarded, but no run open yet (or any more): the handler ends the process
    elif last == f"interrupted ({sig.name}): finished runs kept, open runs marked KILLED":
        outcome = "handled"
    else:
        outcome = "BAD"
    return {"signal": sig.name, "delay_s": round(delay, 3), "rc": proc.returncode, "outcome": outcome,
            "runs": sorted(runs), "last_line": last[:200]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sigint", type=int, default=30)
    ap.add_argument("--sigterm", type=int, default=14)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=None, help="write every trial as a JSON line")
    a = ap.parse_args()
    rng = random.Random(a.seed)
    with tempfile.TemporaryDirectory() as d:
        template = Path(d) / "mlflow.db"
        MlflowClient(f"sqlite:///{template}").search_experiments()  # one empty store, copied for every trial
        with tempfile.TemporaryDirectory() as w:
            t0 = time.perf_counter()
            r = subprocess.run(sweep(Path(w), fresh_store(template, Path(w))), cwd=ROOT, capture_output=True,
                               text=True, env={**os.environ, "TRITON_INTERPRET": "1"})
            length = time.perf_counter() - t0
        assert r.returncode == 0, r.stderr
        print(f"an undisturbed sweep: {length:.2f} s; delays drawn uniformly from [0, {length:.2f}] s", flush=True)
        plan = [signal.SIGINT] * a.sigint + [signal.SIGTERM] * a.sigterm
        rng.shuffle(plan)
        rows = []
        sink = open(a.out, "w") if a.out else None
        for i, sig in enumerate(plan, 1):
            row = trial(template, sig, rng.uniform(0, length))
            rows.append(row)
            print(f"[{i}/{len(plan)}] {row['signal']} at {row['delay_s']:.2f} s → rc {row['rc']}, {row['outcome']}, "
                  f"runs {row['runs']}", flush=True)
            if sink:
                sink.write(json.dumps(row) + "\n")
                sink.flush()
    print("\n| signal | trials | runs closed KILLED | nothing open yet | before start | ended before signal | BAD |\n"
          "|---|---|---|---|---|---|---|")
    for name in ("SIGINT", "SIGTERM"):
        mine = [r for r in rows if r["signal"] == name]
        outcomes = ("handled", "nothing_open", "before_start", "ended_before_signal", "BAD")
        print(f"| {name} | {len(mine)} | " + " | ".join(str(sum(r["outcome"] == o for r in mine)) for o in outcomes) + " |")
    left_running = sum("RUNNING" in r["runs"] for r in rows)
    print(f"\nruns left RUNNING: in {left_running} of {len(rows)} trials")
    return 1 if left_running or any(r["outcome"] == "BAD" for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
