"""Tests run on the CPU through Triton's interpreter; GPU tests are marked `gpu` and skipped without one."""

import os

os.environ["TRITON_INTERPRET"] = "1"  # before anything imports triton's jit: kernels then run on the CPU

import subprocess  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

import pytest  # noqa: E402
import torch  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU; none is visible (tests run on the Triton interpreter)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def store(tmp_path):
    """A real, empty MLflow SQLite store in a temp folder."""
    return f"sqlite:///{tmp_path / 'mlruns' / 'mlflow.db'}"


@pytest.fixture
def run_cli(tmp_path, store):
    """Run `python run.py ...` as a user would, against the temp store; returns the CompletedProcess."""
    def run(*args, env_extra=None, timeout=600):
        env = {**os.environ, "TRITON_INTERPRET": "1", "HYDRA_FULL_ERROR": "0", **(env_extra or {})}
        # a temp pins file too: a test must never write the package's own pins (microtune promotes)
        cmd = [sys.executable, "run.py", *args, f"tracking.uri={store}", f"pins_file={tmp_path / 'pins.yaml'}",
               f"hydra.run.dir={tmp_path / 'out'}", f"hydra.sweep.dir={tmp_path / 'sweep'}"]
        return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
    return run
