"""Tests run on the CPU through Triton's interpreter; GPU tests are marked `gpu` and skipped without one."""

import os
import sys

# Bytecode written and read as Python does by default, also where the environment turns it off
# (PYTHONDONTWRITEBYTECODE): collecting took a test process 25 CPU-s without it and 13.5 with it, and each command the
# tests start compiles the project from source in ~0.3 CPU-s without it.
sys.dont_write_bytecode = False
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
os.environ["TRITON_INTERPRET"] = "1"  # before anything imports triton's jit: kernels then run on the CPU
# The per-user overlay (promote's and first-use tuning's default target) in a folder of the test run's own, never the
# user's cache; the commands the tests start inherit it.
import tempfile  # noqa: E402

os.environ["CONVTUNE_OVERLAY_DIR"] = tempfile.mkdtemp(prefix="convtune-test-overlay-")

import shutil  # noqa: E402
from pathlib import Path  # noqa: E402

import pytest  # noqa: E402
import torch  # noqa: E402
from hypothesis import settings  # noqa: E402

# The property tests draw the same examples on every run and machine: a suite that passes, passes again.
settings.register_profile("convtune", derandomize=True)
settings.load_profile("convtune")

from tests import preloaded  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def pytest_collection_modifyitems(config, items):
    # the tests that mostly wait on processes of their own (a SLURM cluster's tasks) first: xdist hands tests out in
    # this order, so that their waiting overlaps the rest of the suite instead of lengthening its end
    items.sort(key=lambda item: "slurm_cluster" not in item.keywords)
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU; none is visible (tests run on the Triton interpreter)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def empty_store_file(tmp_path_factory):
    """One MLflow SQLite database, created (its schema migrated) once per test run and shared by its test processes
    (xdist's workers, through a folder they share and a lock): creating one takes ~7 CPU-s, and most tests only need
    an empty store, not its creation. Tests copy it (`store`) and never write it."""
    from filelock import FileLock
    from mlflow.tracking import MlflowClient

    shared = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):  # set in xdist's workers (the plugin may also be off: -p no:xdist)
        shared = shared.parent  # the run's folder, above each worker's own
    path = shared / "empty-store" / "mlflow.db"
    with FileLock(str(shared / "empty-store.lock")):
        if not path.exists():
            made = shared / "empty-store-making" / "mlflow.db"
            shutil.rmtree(made.parent, ignore_errors=True)
            made.parent.mkdir()
            MlflowClient(f"sqlite:///{made}").search_experiments()
            made.parent.rename(path.parent)  # whole or absent: a worker that failed here leaves no half-made store
    return path


@pytest.fixture
def store(tmp_path, empty_store_file):
    """A real, empty MLflow SQLite store in a temp folder (a copy of the session's freshly created one)."""
    path = tmp_path / "mlruns" / "mlflow.db"
    path.parent.mkdir(parents=True)
    shutil.copyfile(empty_store_file, path)
    return f"sqlite:///{path}"


@pytest.fixture
def new_store(tmp_path):
    """A store that does not exist yet, where its creation is what a test is about (a folder of its own: `store`,
    which run_cli brings along, copies the template to mlruns/)."""
    return f"sqlite:///{tmp_path / 'new_store' / 'mlflow.db'}"


@pytest.fixture
def run_cli(tmp_path, store):
    """Run `python run.py ...` as a user would, against the temp store; returns the CompletedProcess."""
    def run(*args, env_extra=None, timeout=600, uri=None, interpret_env=True):
        """`interpret_env=False`: without TRITON_INTERPRET in the environment, as a user on a CPU machine runs it
        (the command then settles the interpreter itself)."""
        env = {**os.environ, "TRITON_INTERPRET": "1", "HYDRA_FULL_ERROR": "0", **(env_extra or {})}
        if not interpret_env:
            env.pop("TRITON_INTERPRET")
        # a temp pins file too: a test must never write the package's own pins (microtune promotes)
        cmd = [sys.executable, "run.py", *args, f"tracking.uri={uri or store}", f"pins_file={tmp_path / 'pins.yaml'}",
               f"hydra.run.dir={tmp_path / 'out'}", f"hydra.sweep.dir={tmp_path / 'sweep'}"]
        return preloaded.run(cmd, cwd=ROOT, env=env, timeout=timeout)
    return run


@pytest.fixture
def run_here(tmp_path, store, capsys, caplog):
    """One run of `python run.py ...` in this process: the config run.py would compose, Hydra's own config set
    as the app sees it in a single run, and app.run_job called as run.py calls it. For tests whose subject is
    what a run records and says rather than the command line (that is test_cli.py's); it spares a process
    start (~3.5 s of imports). Returns (exit status as the CLI would end, what it printed and logged)."""
    import logging

    from hydra.core.hydra_config import HydraConfig
    from omegaconf import open_dict

    from convtune.app import run_job

    def run(*overrides, uri=None):
        cfg = compose(*overrides, f"tracking.uri={uri or store}", f"pins_file={tmp_path / 'pins.yaml'}",
                      f"hydra.run.dir={tmp_path / 'out'}")
        with open_dict(cfg):
            cfg.hydra.mode, cfg.hydra.job.num = "RUN", 0
            HydraConfig.instance().set_config(cfg)
            del cfg["hydra"]  # the task sees no `hydra` node, as under @hydra.main
        caplog.set_level(logging.INFO)
        status, last = 0, ""
        try:
            run_job(cfg)
        except SystemExit as e:  # run_job's own one-line exit for a failed single run
            status, last = (1, str(e.code)) if isinstance(e.code, str) else (e.code, "")
        except ValueError as e:  # what run.py turns into one line
            status, last = 1, f"error: {e}"
        return status, "\n".join([capsys.readouterr().out, caplog.text, last])
    return run


def compose(*overrides):
    """The composed config with its `hydra` node, as `python run.py ...` would compose it from ROOT, for
    calling a task in-process (resolve.resolve reads the hydra node a composed config carries)."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    from convtune.config import register_configs

    register_configs()
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        return hydra_compose("config", overrides=list(overrides), return_hydra_config=True)


def own_pins(tmp_path, monkeypatch):
    """An empty pins file of the test's own, read alone (no overlay, no tuning on first use), and the interpreter on:
    the pins the test writes there decide."""
    from convtune import pins
    from convtune.library import dispatch
    from convtune.pins import overlay

    f = tmp_path / "pins.yaml"
    pins.create_empty(f)
    monkeypatch.setenv(pins.ENV_VAR, str(f))
    monkeypatch.setenv(overlay.ENV, str(tmp_path / "overlay"))
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    monkeypatch.delenv(dispatch.TUNE_ENV, raising=False)
    monkeypatch.delenv(dispatch.UNPINNED_ENV, raising=False)
    return f


def compiled_for_sm90(script: str) -> list:
    """What `script` (Python that compiles with the installed Triton for a named target and prints a JSON list last)
    prints, run in a process without TRITON_INTERPRET (under it a @triton.jit kernel is the interpreter's and compiles
    nothing); skipped where this Triton ships no ptxas. No GPU needed."""
    import json

    import triton

    if not (Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "ptxas").exists():
        pytest.skip("this Triton ships no ptxas")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    r = preloaded.run([sys.executable, "-c", script], env=env, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])
