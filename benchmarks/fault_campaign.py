"""Faults of the disk, the store and the pins file against real `run.py` / `promote.py` processes: is anything lost,
left RUNNING or told with a traceback?

    sudo python benchmarks/fault_campaign.py [--out faults.jsonl]

Each case runs on the Triton interpreter (`problem=tiny bench=fast`) in a folder of its own and prints one row: the
exit code, the last line said, whether a traceback was printed, the runs left RUNNING once a later run (with the
fault removed) has reaped what the faulty one could not close, and whether data was lost (pins or finished runs
that were there before). The full-disk cases mount a small tmpfs and the read-only case a read-only one, so they
need root; without it they are reported as skipped. The in-process tests (tests/test_store_faults.py,
tests/test_pins_library.py) cover the same faults where no mount or server is needed; this is their real-process
complement, not a test: a full disk's timing varies by design.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Iterator, Optional

from mlflow.tracking import MlflowClient

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "TRITON_INTERPRET": "1", "HYDRA_FULL_ERROR": "0"}
PIN_KEY = "n2-c3-h19-w17-k20-r5x5-s2x1-p2x1-d1x1-g1-bias-nchw-float32/tf32"  # the tiny problem's key


def run(args: list[str], work: Path, entry: str = "run.py", env: Optional[dict] = None,
        timeout: float = 600) -> subprocess.CompletedProcess:
    cmd = [sys.executable, str(ROOT / entry), *args, f"hydra.run.dir={work / 'out'}"]
    return subprocess.run(cmd, cwd=work, env=env or ENV, capture_output=True, text=True, timeout=timeout)


def sweep_args(store: str, work: Path, pins: Path) -> list[str]:
    return ["-m", "problem=tiny", "bench=fast", "num_warps=2,4,8", "BLOCK_M=16,32", f"tracking.uri={store}",
            f"pins_file={pins}", f"hydra.sweep.dir={work / 'sweep'}"]


def statuses(store: str) -> list[str]:
    c = MlflowClient(store)
    return [r.info.status for e in c.search_experiments() for r in c.search_runs([e.experiment_id], max_results=1000)]


def finished(store: str) -> set[str]:
    c = MlflowClient(store)
    return {r.info.run_id for e in c.search_experiments() for r in c.search_runs([e.experiment_id], max_results=1000)
            if r.info.status == "FINISHED"}


@contextlib.contextmanager
def tmpfs(size: str, read_only: bool = False) -> Iterator[Path]:
    d = Path(tempfile.mkdtemp(prefix="convtune-fault-"))
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(d)], check=True, capture_output=True)
    try:
        yield d
    finally:
        subprocess.run(["umount", "-l", str(d)], capture_output=True)
        shutil.rmtree(d, ignore_errors=True)


def remount_read_only(d: Path) -> None:
    subprocess.run(["mount", "-o", "remount,ro", str(d)], check=True, capture_output=True)


def fill(d: Path, leave_kb: int) -> None:
    """Fill the file system of `d` until `leave_kb` KiB are free."""
    free = shutil.disk_usage(d).free - leave_kb * 1024
    if free > 0:
        with open(d / "filler", "wb") as f:
            f.write(b"\0" * free)


def row(case: str, r: subprocess.CompletedProcess, running: Optional[int], lost: Optional[int], note: str = "",
        expect_ok: bool = False) -> dict:
    """One case's outcome. `expect_ok`: the command should succeed (exit 0) despite the fault; else it must refuse."""
    lines = (r.stderr.strip() or r.stdout.strip()).splitlines() or [""]
    return {"case": case, "rc": r.returncode, "last_line": lines[-1][:160], "expect_ok": expect_ok,
            "traceback": "Traceback" in r.stdout + r.stderr, "left_running": running, "lost": lost, "note": note}


def template_store(d: Path) -> Path:
    path = d / "template.db"
    MlflowClient(f"sqlite:///{path}").search_experiments()
    return path


def store_in(folder: Path, template: Path) -> str:
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(template, folder / "mlflow.db")
    return f"sqlite:///{folder / 'mlflow.db'}"


def case_full_disk_mid_sweep(work: Path, template: Path) -> dict:
    with tmpfs("2m") as disk:
        store = store_in(disk / "mlruns", template)
        first = run(["problem=tiny", "bench=fast", f"tracking.uri={store}", f"pins_file={work / 'pins.yaml'}"], work)
        assert first.returncode == 0, first.stderr
        kept = finished(store)
        fill(disk, 64)  # room for the parent and a run or two: the disk fills mid-sweep
        r = run(sweep_args(store, work, work / "pins.yaml"), work)
        (disk / "filler").unlink()
        again = run(["problem=tiny", "bench=fast", f"tracking.uri={store}", f"pins_file={work / 'pins.yaml'}"], work)
        left = statuses(store)
        temp = [p.name for p in disk.rglob("*") if ".creating-" in p.name or p.suffix == ".tmp"]
        lost = len(kept - finished(store))
        return row("full disk mid-sweep", r, left.count("RUNNING"), lost,
                   f"next run rc {again.returncode}; {len(left)} runs; temporary files left: {temp or 'none'}")


def case_new_store_on_a_full_disk(work: Path, template: Path) -> dict:
    with tmpfs("2m") as disk:
        fill(disk, 64)
        r = run(["problem=tiny", "bench=fast", f"tracking.uri=sqlite:///{disk / 'mlruns' / 'mlflow.db'}",
                 f"pins_file={work / 'pins.yaml'}"], work)
        left = sorted(p.name for p in (disk / "mlruns").iterdir()) if (disk / "mlruns").exists() else []
        temp = [n for n in left if ".creating-" in n]
        return row("new store on a full disk", r, 0, 0, f"left in mlruns/: {left}; temporary files: {temp or 'none'}")


def _damage(db: Path, name: str) -> None:
    con = sqlite3.connect(db)
    con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    page = con.execute("PRAGMA page_size").fetchone()[0]
    root = con.execute("SELECT rootpage FROM sqlite_master WHERE name = ?", (name,)).fetchone()[0]
    con.close()
    with open(db, "r+b") as f:
        f.seek((root - 1) * page)
        f.write(b"\x07" * 8)


def case_damaged_page(work: Path, template: Path, name: str) -> dict:
    store = store_in(work / "mlruns", template)
    ok = run(["problem=tiny", "bench=fast", f"tracking.uri={store}", f"pins_file={work / 'pins.yaml'}"], work)
    assert ok.returncode == 0, ok.stderr
    db = work / "mlruns" / "mlflow.db"
    _damage(db, name)
    before = hashlib.sha256(db.read_bytes()).hexdigest()
    r = run(sweep_args(store, work, work / "pins.yaml"), work)
    after = hashlib.sha256(db.read_bytes()).hexdigest()
    return row(f"damaged page ({name})", r, 0, 0, "store unchanged" if before == after else "STORE WRITTEN")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def case_frozen_server(work: Path, template: Path) -> dict:
    port = _free_port()
    server = subprocess.Popen([sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1", "--port", str(port),
                               "--backend-store-uri", store_in(work / "server", template),
                               "--artifacts-destination", (work / "artifacts").as_uri(), "--workers", "1"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
                break
            time.sleep(0.5)
        time.sleep(3)
        os.killpg(server.pid, signal.SIGSTOP)
        t0 = time.monotonic()
        r = run(["problem=tiny", "bench=fast", f"tracking.uri=http://127.0.0.1:{port}", f"pins_file={work / 'pins.yaml'}"],
                work, timeout=300)
        took = time.monotonic() - t0
    finally:
        os.killpg(server.pid, signal.SIGCONT)
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=30)
    return row("frozen server (SIGSTOP)", r, 0, 0, f"ended after {took:.1f} s")


def case_reserved_path(work: Path, name: str) -> dict:
    t0 = time.monotonic()
    r = run(["problem=tiny", "bench=fast", f"tracking.uri=sqlite:///{work / name / 'mlflow.db'}",
             f"pins_file={work / 'pins.yaml'}"], work)
    made = [p.name for p in work.iterdir() if p.name not in ("out", "pins.yaml")]
    return row(f"'{name}' in the store's path", r, 0, 0, f"ended after {time.monotonic() - t0:.1f} s; created: {made or 'nothing'}")


def _pin(work: Path, pins_file: Path, template: Path) -> str:
    from convtune.kernels import Meta
    from convtune import pins

    pins.write_pin(pins_file, "interpreter", "implicit_gemm", PIN_KEY, Meta(16, 16, 16, 4, 2), {"note": "planted"})
    store = store_in(work / "mlruns", template)
    sw = run(["-m", "problem=tiny", "bench=fast", "BLOCK_M=64,128", f"tracking.uri={store}", f"pins_file={pins_file}",
              f"hydra.sweep.dir={work / 'sweep'}"], work)
    assert sw.returncode == 0, sw.stderr
    return store


def case_read_only_pins_folder(work: Path, template: Path) -> dict:
    with tmpfs("1m") as folder:
        pins_file = folder / "pins.yaml"
        store = _pin(work, pins_file, template)
        before = pins_file.read_text()
        remount_read_only(folder)
        t0 = time.monotonic()
        r = run(["problem=tiny", f"tracking.uri={store}", f"pins_file={pins_file}", "promote.rounds=4",
                 "promote.reps=1"], work, entry="promote.py")
        lost = int(pins_file.read_text() != before)
        return row("read-only pins folder (promote)", r, statuses(store).count("RUNNING"), lost,
                   f"ended after {time.monotonic() - t0:.1f} s")


def case_read_only_pins_file(work: Path, template: Path) -> dict:
    pins_file = work / "pins" / "pins.yaml"
    store = _pin(work, pins_file, template)
    pins_file.chmod(0o444)
    before = pins_file.read_text()
    r = run(["problem=tiny", f"tracking.uri={store}", f"pins_file={pins_file}", "promote.rounds=4", "promote.reps=1"],
            work, entry="promote.py")
    mode = pins_file.stat().st_mode & 0o777
    return row("pins file chmod 444 (promote)", r, statuses(store).count("RUNNING"),
               int(pins_file.read_text() != before), f"mode after: {mode:o}")


def case_repeated_block(work: Path, template: Path) -> dict:
    pins_file = work / "pins.yaml"
    store = _pin(work, pins_file, template)
    text = pins_file.read_text()
    block = text[text.index("  interpreter:"):text.index("# end of pins")]
    doubled = text.replace("# end of pins\n", "") + block.replace("16", "32") + "# end of pins\n"
    pins_file.write_text(doubled)
    r = run(["problem=tiny", f"tracking.uri={store}", f"pins_file={pins_file}", "promote.rounds=4", "promote.reps=1"],
            work, entry="promote.py")
    return row("pins file with a repeated block (promote)", r, statuses(store).count("RUNNING"),
               int(pins_file.read_text() != doubled))


LIBRARY_CALL = """
import sys
import torch, convtune
x, w = torch.rand(1, 4, 6, 6), torch.rand(4, 4, 3, 3)
try:
    convtune.conv2d(x, w, torch.ones(4), padding=1)  # the signature's first call, planned and cached
    {call}
except (RuntimeError, ValueError) as e:
    sys.exit(f"error: {{type(e).__name__}}: {{e}}")
print("accepted")
"""


def python_c(code: str, work: Path, env_extra: dict) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, env={**ENV, **env_extra}, capture_output=True,
                          text=True, timeout=300)


def case_library_refusal(work: Path, name: str, call: str, env_extra: dict) -> dict:
    """A library call that must be refused in one line (accepted = data silently wrong: `lost` 1)."""
    r = python_c(LIBRARY_CALL.format(call=call), work, env_extra)
    return row(name, r, 0, int("accepted" in r.stdout))


def case_in_memory_store(work: Path) -> dict:
    r = run(["problem=tiny", "bench=fast", "tracking.uri=sqlite://", f"pins_file={work / 'pins.yaml'}"], work)
    return row("in-memory store (sqlite://)", r, 0, int(r.returncode == 0))  # exit 0 here meant the run was gone


def case_foreign_database(work: Path) -> dict:
    db = work / "theirs.db"
    con = sqlite3.connect(db)
    con.execute("CREATE TABLE people (id INTEGER)")
    con.commit()
    con.close()
    before = hashlib.sha256(db.read_bytes()).hexdigest()
    r = run(["problem=tiny", "bench=fast", f"tracking.uri=sqlite:///{db}", f"pins_file={work / 'pins.yaml'}"], work)
    return row("foreign SQLite database as the store", r, 0, int(hashlib.sha256(db.read_bytes()).hexdigest() != before))


def case_symlinked_pins(work: Path, template: Path) -> dict:
    """promote through a symbolic link: the target must get the pin, the link stay a link."""
    real = work / "real" / "pins.yaml"
    store = _pin(work, real, template)
    link = work / "link.yaml"
    link.symlink_to(real)
    r = run(["problem=tiny", f"tracking.uri={store}", f"pins_file={link}", "promote.rounds=4", "promote.reps=1",
             "promote.min_gain=0", "promote.confidence=0.5"], work, entry="promote.py")
    from convtune import pins

    value = pins.pinned_value(pins.load(real), "interpreter", PIN_KEY)
    lost = int(not link.is_symlink() or ("decision: PROMOTE" in r.stdout and value == pins.KernelPin(
        "implicit_gemm", pins.Meta(16, 16, 16, 4, 2))))
    return row("pins file behind a symbolic link (promote)", r, statuses(store).count("RUNNING"), lost,
               f"link kept: {link.is_symlink()}", expect_ok=True)


def case_tune_model_resume_without_its_pins(work: Path, template: Path) -> dict:
    """tune_model, then the pins file deleted, then tune_model again: every shape's decision must be in the pins file
    at the end (it once resumed from MLflow's record and wrote nothing)."""
    store = store_in(work / "mlruns", template)
    pins_file = work / "pins.yaml"
    args = ["model=tests.tiny_models:two_shapes", "input=[3,6,6]", "batch=1", "device=interpreter", "turns=3",
            "warmup=0", f"tracking.uri={store}", f"pins_file={pins_file}", "shapes=2"]
    env = {k: v for k, v in ENV.items() if k != "TRITON_INTERPRET"}
    first = subprocess.run([sys.executable, str(ROOT / "tune_model.py"), *args, f"hydra.run.dir={work / 'o1'}"],
                           cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert first.returncode == 0, first.stdout[-2000:] + first.stderr[-2000:]
    pins_file.unlink()
    r = subprocess.run([sys.executable, str(ROOT / "tune_model.py"), *args, f"hydra.run.dir={work / 'o2'}"],
                       cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    from convtune import pins

    c = MlflowClient(store)
    (model_run,) = [x for e in c.search_experiments() for x in c.search_runs([e.experiment_id])
                    if x.data.tags.get("kind") == "tune_model"]
    held = {k[len("pinned/"):]: v for k, v in model_run.data.tags.items() if k.startswith("pinned/")}
    data = pins.load(pins_file)
    lost = sum(v != pins.describe(pins.pinned_value(data, "interpreter", k)) for k, v in held.items())
    return row("tune_model resumed after its pins file was deleted", r, statuses(store).count("RUNNING"), lost,
               f"{r.stdout.count('decided again')} shape(s) decided again", expect_ok=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=None, help="write every case as a JSON line")
    a = ap.parse_args()
    root = os.geteuid() == 0
    rows = []
    with tempfile.TemporaryDirectory() as d:
        template = template_store(Path(d))
        cases = [
            ("full disk mid-sweep", root, lambda w: case_full_disk_mid_sweep(w, template)),
            ("new store on a full disk", root, lambda w: case_new_store_on_a_full_disk(w, template)),
            ("damaged index page", True, lambda w: case_damaged_page(w, template, "index_latest_metrics_run_uuid")),
            ("damaged metrics table", True, lambda w: case_damaged_page(w, template, "metrics")),
            ("frozen server", True, lambda w: case_frozen_server(w, template)),
            ("'?' in the path", True, lambda w: case_reserved_path(w, "a?b")),
            ("'%41' in the path", True, lambda w: case_reserved_path(w, "a%41b")),
            ("read-only pins folder", root, lambda w: case_read_only_pins_folder(w, template)),
            ("pins file chmod 444", True, lambda w: case_read_only_pins_file(w, template)),
            ("repeated pins block", True, lambda w: case_repeated_block(w, template)),
            # the data-loss cases of the 2026-11-28 campaign
            ("tune_model resume without its pins", True, lambda w: case_tune_model_resume_without_its_pins(w, template)),
            ("stale bias size", True, lambda w: case_library_refusal(
                w, "a bias of the wrong size after the first call", "convtune.conv2d(x, w, torch.ones(3), padding=1)",
                {"CONVTUNE_UNPINNED": "kernel"})),
            ("stride 0", True, lambda w: case_library_refusal(
                w, "stride 0 on the kernel path", "convtune.conv2d(x, w, None, stride=0)",
                {"CONVTUNE_UNPINNED": "kernel"})),
            ("CONVTUNE_PINS missing", True, lambda w: case_library_refusal(
                w, "CONVTUNE_PINS naming a missing file", "convtune.conv2d(x, w, padding=1)",
                {"CONVTUNE_PINS": str(w / "missing.yaml")})),
            ("CONVTUNE_TUNE=false", True, lambda w: case_library_refusal(
                w, "CONVTUNE_TUNE=false must mean off", "assert not __import__('convtune').library.dispatch.tuning(); "
                "sys.exit('error: tuning is off, as asked')", {"CONVTUNE_TUNE": "false"})),
            ("in-memory store", True, case_in_memory_store),
            ("foreign database", True, case_foreign_database),
            ("symlinked pins file", True, lambda w: case_symlinked_pins(w, template)),
        ]
        for name, runnable, case in cases:
            if not runnable:
                rows.append({"case": name, "rc": None, "last_line": "skipped: needs root (mount)", "traceback": False,
                             "left_running": None, "lost": None, "note": ""})
                continue
            with tempfile.TemporaryDirectory() as w:
                rows.append(case(Path(w)))
            print(json.dumps(rows[-1]), flush=True)
    if a.out:
        Path(a.out).write_text("".join(json.dumps(r) + "\n" for r in rows))
    print("\n| case | exit | last line | traceback | RUNNING after the next run | data lost | note |\n|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['case']} | {r['rc']} | {r['last_line']} | {'YES' if r['traceback'] else 'no'} | "
              f"{r['left_running']} | {r['lost']} | {r['note']} |")
    bad = [r for r in rows if r["rc"] is not None and (r["traceback"] or r["left_running"] or r["lost"]
                                                         or (r["rc"] == 0) != r.get("expect_ok", False))]
    print(f"\n{len(rows)} cases, {len(bad)} with a traceback, runs left RUNNING, data lost or an unexpected exit "
          "(0 where the fault must be refused, else non-zero)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
