"""promote.py end to end on the interpreter: real sweeps into a temp SQLite store, real promote runs."""

import os
import re
import subprocess
import sys

import pytest
from mlflow.tracking import MlflowClient

from convtune.kernels import Meta, get_variant, pins
from convtune.track.store import Tracker
from tests.conftest import ROOT

KEY = "n2-c3-h19-w17-k20-r5x5-s2x1-p2x1-d1x1-g1-bias-nchw-float32/tf32"
FAST = ["BLOCK_M=128", "BLOCK_N=64", "BLOCK_K=32", "num_warps=4", "num_stages=3"]
SLOW = Meta(16, 16, 16, 4, 2)  # 40 programs on tiny against 4: ~10x slower under the interpreter


@pytest.fixture
def pins_file(tmp_path):
    f = tmp_path / "pins.yaml"
    pins.write_pin(f, "interpreter", "implicit_gemm", KEY, SLOW, {"run_id": None, "note": "planted slow pin"})
    return f


def promote(tmp_path, store, pins_file, *args):
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    cmd = [sys.executable, "promote.py", "problem=tiny", f"tracking.uri={store}", f"pins_file={pins_file}",
           f"hydra.run.dir={tmp_path / 'promote_out'}", "promote.rounds=4", "promote.reps=1", *args]
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)


def plant(store, **tags):
    """A real run in the store that would win if promote considered it (0.001 ms)."""
    t = Tracker(store)
    exp = t.experiment_id("tiny [interpreter]")
    base = {"problem_key": KEY.rsplit("/", 1)[0], "kernel": "implicit_gemm", "precision": "tf32",
            "device": "interpreter", "status": "ok", "kernel_source_hash": get_variant("implicit_gemm").source_hash}
    run = t.start_run(exp, "planted", {**base, **tags})
    t.log(run, params=dict(zip(("BLOCK_M", "BLOCK_N", "BLOCK_K", "num_warps", "num_stages"), (32, 32, 32, 2, 2))),
          metrics={"latency_ms": 0.001})
    t.end(run, "FAILED" if tags.get("status") == "incorrect" else "FINISHED")
    return run


def test_promote_replaces_a_slow_pin_and_ignores_failed_stale_and_other_device_runs(run_cli, tmp_path, store, pins_file):
    assert run_cli("-m", "problem=tiny", "bench=fast", *FAST).returncode == 0
    assert run_cli("-m", "problem=tiny", "bench=fast", "BLOCK_M=48").returncode == 0  # a FAILED run
    planted = [plant(store, kernel_source_hash="0ld50urceh45"), plant(store, device="NVIDIA H200"),
               plant(store, status="incorrect")]
    r = promote(tmp_path, store, pins_file)
    assert r.returncode == 0, r.stderr
    assert "ignoring 1 run(s) made with an older kernel source" in r.stdout
    assert "decision: PROMOTE" in r.stdout and not any(p in r.stdout for p in planted)
    entry = pins.load(pins_file)["pins"]["interpreter"]["implicit_gemm"][KEY]
    assert entry["meta"] == Meta(128, 64, 32, 4, 3).as_dict()
    prov = entry["provenance"]
    assert prov["previous"]["meta"] == SLOW.as_dict() and prov["gain"] > 0.02 and prov["remeasured"] is True
    assert prov["kernel_source_hash"] == get_variant("implicit_gemm").source_hash and prov["run_id"]
    assert re.search(r"^-\s+BLOCK_M: 16$", r.stdout, re.M) and re.search(r"^\+\s+BLOCK_M: 128$", r.stdout, re.M)  # the diff
    c = MlflowClient(store)
    assert c.get_run(prov["run_id"]).data.tags["convtune.promoted"] == "true"
    (decision,) = [x for x in c.search_runs([c.get_experiment_by_name("tiny [interpreter]").experiment_id])
                   if x.data.tags.get("kind") == "promote"]
    assert decision.data.tags["decision"] == "promoted" and decision.data.metrics["gain"] > 0.02
    assert {a.path for a in c.list_artifacts(decision.info.run_id)} == {"contest.md", "pins.diff"}


def test_promote_keeps_the_pin_when_the_gain_is_below_min_gain(run_cli, tmp_path, store, pins_file):
    assert run_cli("-m", "problem=tiny", "bench=fast", *FAST).returncode == 0
    before = pins_file.read_text()
    r = promote(tmp_path, store, pins_file, "promote.min_gain=100")
    assert r.returncode == 0, r.stderr
    assert "decision: KEEP: gain" in r.stdout and "< 10000 %" in r.stdout
    assert pins_file.read_text() == before


def test_no_gpu_pin_is_written_from_another_machine_unless_remeasure_is_off(tmp_path, store, pins_file):
    plant(store, device="NVIDIA H200")
    before = pins_file.read_text()
    r = promote(tmp_path, store, pins_file, "promote.device_name=NVIDIA H200")
    assert r.returncode == 1 and "refused: this machine is interpreter, not NVIDIA H200" in r.stdout
    assert pins_file.read_text() == before
    r = promote(tmp_path, store, pins_file, "promote.device_name=NVIDIA H200", "promote.remeasure=false")
    # the H200 has no pin and no logged run of its default config: nothing to compare against
    assert r.returncode == 0 and "has no measurement" in r.stdout and pins_file.read_text() == before


@pytest.mark.parametrize("override,message", [
    ("promote.top_k=0", "error: promote.top_k=0 is not allowed: an integer >= 1"),
    ("promote.rounds=1", "error: promote.rounds=1 is not allowed: an integer >= 2 (the bootstrap needs rounds)"),
    ("promote.confidence=1.5", "error: promote.confidence=1.5 is not allowed: a probability in [0.5, 1)"),
])
def test_bad_promote_settings_fail_in_one_line(tmp_path, store, pins_file, override, message):
    r = promote(tmp_path, store, pins_file, override)
    assert r.returncode == 1 and r.stderr.strip().splitlines()[-1] == message and "Traceback" not in r.stderr


def test_a_broken_pins_file_stops_promote_with_its_name(tmp_path, store):
    broken = tmp_path / "broken.yaml"
    broken.write_text("pins: [1, 2\n")
    r = promote(tmp_path, store, broken)
    assert r.returncode == 1 and f"error: pins file {broken}: not valid YAML" in r.stderr
    assert broken.read_text() == "pins: [1, 2\n"


def test_export_writes_a_self_contained_kernelbench_file(tmp_path, store, pins_file):
    out = tmp_path / "model_new.py"
    r = promote(tmp_path, store, pins_file, "export=kernelbench", f"export_path={out}")
    assert r.returncode == 0, r.stderr
    assert "not checked: no GPU here" in r.stdout
    text = out.read_text()
    assert text.startswith("import torch\nimport torch.nn as nn\nimport triton\nimport triton.language as tl\n")
    assert "@triton.jit" in text and "class ModelNew(nn.Module)" in text and "BLOCK_M, BLOCK_N, BLOCK_K, NUM_WARPS, NUM_STAGES = 16, 16, 16, 4, 2" in text
    for banned in ("if __name__", "get_inputs", "get_init_inputs", "convtune", "autotune"):
        assert banned not in text
    check = (
        "import importlib.util, torch, torch.nn.functional as F\n"
        f"spec = importlib.util.spec_from_file_location('m', {str(out)!r}); m = importlib.util.module_from_spec(spec)\n"
        "spec.loader.exec_module(m)\n"
        "model = m.ModelNew(); ref = torch.nn.Conv2d(3, 20, 5, stride=(2, 1), padding=(2, 1))\n"
        "model.conv1.load_state_dict(ref.state_dict())\n"
        "x = torch.rand(2, 3, 19, 17)\n"
        "torch.testing.assert_close(model(x), ref(x))\n"  # CPU: the brief's fallback to self.conv1
        "y = m.conv2d_triton(x, ref.weight.detach(), ref.bias.detach())\n"  # the Triton kernel (interpreter)
        # tf32: operands rounded to nearest TF32 (cuDNN's rounding), exact sums in the interpreter
        "r = lambda t: ((t.detach().view(torch.int32) + 0x1000) & -8192).view(torch.float32).double()\n"
        "want = F.conv2d(r(x), r(ref.weight), ref.bias.detach().double(), (2, 1), (2, 1)).float()\n"
        "torch.testing.assert_close(y, want, rtol=1e-6, atol=1e-6)\n"
        "print('ok')\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHONPATH")}
    env["TRITON_INTERPRET"] = "1"
    r = subprocess.run([sys.executable, "-c", check], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr
