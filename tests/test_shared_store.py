"""`tracking=server`: one MLflow tracking server over PostgreSQL as the store of a sweep whose 2 jobs write at
once (the gpus launcher on two faked GPU slots, each job in its own process). Real PostgreSQL (initdb in a
temporary folder) and a real `mlflow server` on 127.0.0.1, both stopped by the test; `.ci/run` installs
PostgreSQL where it is missing."""

import os
import socket
import sys

import pytest
from mlflow.tracking import MlflowClient

from tests import preloaded
from tests.conftest import ROOT
from tests.servers import mlflow_server, postgres, postgres_bin

pytestmark = [pytest.mark.slow, pytest.mark.skipif(
    postgres_bin() is None and os.environ.get("CONVTUNE_REQUIRE_POSTGRES") != "1",
    reason="PostgreSQL is not installed (apt-get install postgresql; .ci/run installs it and requires this test)")]


def test_a_sweep_of_parallel_workers_writes_every_run_into_one_server_over_postgresql(tmp_path):
    with postgres() as db, mlflow_server(db, tmp_path / "artifacts") as url:
        env = {**os.environ, "TRITON_INTERPRET": "1", "MLFLOW_TRACKING_URI": url}
        cmd = [sys.executable, "run.py", "-m", "tracking=server", "hydra/launcher=gpus", "hydra.launcher.gpus=[0,1]",
               "problem=tiny", "bench=fast", "num_warps=1,2",
               f"pins_file={tmp_path / 'pins.yaml'}", f"hydra.sweep.dir={tmp_path / 'sweep'}"]
        r = preloaded.run(cmd, cwd=ROOT, env=env, timeout=900)
        assert r.returncode == 0, (r.stdout + r.stderr)[-4000:]
        assert "Launching 2 jobs, one process each, on 2 GPU(s) (0, 1)" in r.stdout + r.stderr
        assert f"browse: {url}/#/experiments/" in r.stdout

        client = MlflowClient(url)  # read back through the server, as a user would
        exp = client.get_experiment_by_name("tiny [interpreter]")
        runs = client.search_runs([exp.experiment_id])
        parents = [x for x in runs if "mlflow.parentRunId" not in x.data.tags]
        kids = [x for x in runs if "mlflow.parentRunId" in x.data.tags]
        assert len(parents) == 1 and parents[0].info.status == "FINISHED"
        assert len(kids) == 2 and {x.data.tags["mlflow.parentRunId"] for x in kids} == {parents[0].info.run_id}
        assert all(x.info.status == "FINISHED" and x.data.tags["status"] == "ok" and x.data.metrics["latency_ms"] > 0
                   for x in kids)
        assert {x.data.params["num_warps"] for x in kids} == {"1", "2"}
        assert {x.data.tags["gpu_slot"] for x in kids} == {"0", "1"}  # two workers wrote, at once
        assert "config.yaml" in {a.path for a in client.list_artifacts(kids[0].info.run_id)}  # artifacts through it
    for port in (int(url.rsplit(":", 1)[1]), int(db.split("@127.0.0.1:")[1].split("/")[0])):  # both stopped
        with socket.socket() as s:
            assert s.connect_ex(("127.0.0.1", port)) != 0, f"something still listens on {port}"
