"""tune_model.py: a model's distinct convolutions each swept and promoted through the tracker under one MLflow run
of the model, the model timed end to end, and a rerun that goes on in the same run. A real `python tune_model.py`
(which starts a real `run.py` per shape) on Triton's interpreter with a real SQLite store; the end-to-end numbers
there are CPU times of torch against torch (the library runs torch for CPU tensors), so only the pipeline is
checked here; tests/gpu_scripts and benchmarks/ time it on a GPU."""

import os
from collections import Counter
from pathlib import Path
import subprocess
import sys

import pytest
import torch
import yaml
from mlflow.tracking import MlflowClient

from tests import preloaded
from tests.conftest import ROOT, own_pins

KEYS = ["n1-c4-h6-w6-k4-r3x3-s1x1-p1x1-d1x1-g1-bias-nchw-float32/tf32",
        "n1-c3-h6-w6-k4-r3x3-s1x1-p1x1-d1x1-g1-bias-nchw-float32/tf32"]


def tune_model(tmp_path, store, *args):
    """tune_model.py device=interpreter without TRITON_INTERPRET in the environment, as a user without a GPU runs it:
    it and each shape's `run.py +experiment=candidates` settle the interpreter themselves."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["HYDRA_FULL_ERROR"] = "0"
    cmd = [sys.executable, "tune_model.py", "model=tests.tiny_models:two_shapes", "input=[3,6,6]", "batch=1",
           "device=interpreter", "turns=3", "warmup=0", f"tracking.uri={store}", f"pins_file={tmp_path / 'pins.yaml'}",
           f"hydra.run.dir={tmp_path / 'out'}", *args]
    return preloaded.run(cmd, cwd=ROOT, env=env, timeout=600)


@pytest.mark.slow
def test_each_shape_is_swept_and_promoted_under_the_models_run_and_a_rerun_goes_on_there(tmp_path, store):
    from convtune import pins

    r = tune_model(tmp_path, store)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "2 distinct convolution(s)" in r.stdout
    # the shape two layers run has twice the FLOPs of the first layer's per model call: it goes first
    assert f"[1/2] {KEYS[0]} (2 layer(s): 2, 4): " in r.stdout and f"[2/2] {KEYS[1]} (1 layer(s): 0): " in r.stdout
    c = MlflowClient(store)
    (exp,) = [e for e in c.search_experiments() if e.name == "tune_model tests.tiny_models:two_shapes [interpreter]"]
    runs = c.search_runs([exp.experiment_id])
    (model_run,) = [x for x in runs if x.data.tags.get("kind") == "tune_model"]
    assert model_run.info.status == "FINISHED" and "mlflow.parentRunId" not in model_run.data.tags
    decided = {k[len("done/"):]: v for k, v in model_run.data.tags.items() if k.startswith("done/")}
    assert sorted(decided) == sorted(KEYS) and all(v.startswith(("PROMOTE", "KEEP")) for v in decided.values())
    note = model_run.data.tags["mlflow.note.content"]
    assert "| torch |" in note and "| converted |" in note and "(interpreter)" in note
    assert model_run.data.params["model"] == "tests.tiny_models:two_shapes"
    assert "speedup_vs_torch" in model_run.data.metrics
    nested = [x for x in runs if x.data.tags.get("mlflow.parentRunId") == model_run.info.run_id]
    sweeps = [x for x in nested if x.data.tags.get("kind") != "promote"]
    decisions = [x for x in nested if x.data.tags.get("kind") == "promote"]
    assert len(sweeps) == 2 and len(decisions) == 2  # one sweep and one promote decision a shape, in the model's run
    for sweep in sweeps:
        configs = [x for x in runs if x.data.tags.get("mlflow.parentRunId") == sweep.info.run_id]
        assert len({x.data.params["kernel"] for x in configs}) >= 3  # the library's kernels that take the shape
    written = pins.load(tmp_path / "pins.yaml")["pins"].get("interpreter", {})
    promoted = [k for k, v in decided.items() if v.startswith("PROMOTE")]
    assert all(any(k in section for section in written.values()) for k in promoted)

    held = {k[len("pinned/"):]: v for k, v in model_run.data.tags.items() if k.startswith("pinned/")}
    assert sorted(held) == sorted(KEYS)  # what the pins file held for each key once it was decided

    # The pins file loses the first key's decision (an overlay deleted, another pins_file=): that shape is decided
    # again, the other goes on from the run's record.
    data = pins.load(tmp_path / "pins.yaml")
    if held[KEYS[0]] == "none":  # nothing was written for it: the file now says something else
        pins.write_pin(tmp_path / "pins.yaml", "interpreter", "implicit_gemm", KEYS[0], pins.TORCH, {"by": "hand"})
    else:
        section, _ = pins.pin_for(data, "interpreter", KEYS[0])
        del data["pins"]["interpreter"][section][KEYS[0]]
        (tmp_path / "pins.yaml").write_text(pins.HEADER + yaml.safe_dump(data) + pins.END)
    r = tune_model(tmp_path, store)  # the same model, batch, layout and mode: it goes on in the same run
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert f"resuming run {model_run.info.run_id}: 2 shape(s) decided before" in r.stdout
    assert r.stdout.count("decided before for this model, not tuned again") == 1
    assert f"[1/2] {KEYS[0]} (2 layer(s): 2, 4): decided before for this model, but " in r.stdout
    assert "does not hold that decision" in r.stdout
    runs = c.search_runs([exp.experiment_id])
    # the first shape's second sweep and promote decision, nested in the same run
    assert len([x for x in runs if x.data.tags.get("mlflow.parentRunId") == model_run.info.run_id]) == 6
    assert c.get_run(model_run.info.run_id).info.status == "FINISHED"
    after = c.get_run(model_run.info.run_id).data.tags[f"pinned/{KEYS[0]}"]
    value = pins.pinned_value(pins.load(tmp_path / "pins.yaml"), "interpreter", KEYS[0])
    assert after == (pins.describe(value) if value is not None else "none")

    # compile=true: a run of its own, whose shapes were decided by the eager run (no sweep again); it times compiled
    # copies (aot_eager on the interpreter) and writes a "+compiled" pin for each shape whose plain pin names a kernel
    # and none for the others (on the interpreter torch usually wins promote; tests/test_compiled_context.py checks the
    # pins of shapes that run a kernel)
    plain = pins.load(tmp_path / "pins.yaml")
    on_kernel = [k for k in KEYS if pins.pinned_value(plain, "interpreter", k) not in (None, pins.TORCH)]
    r = tune_model(tmp_path, store, "compile=true")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "2 shape(s) decided before by the eager run of this model" in r.stdout, r.stdout[-3000:]
    assert r.stdout.count("decided before for this model, not tuned again") == 2
    assert "decided in compiled context" in r.stdout and "median ms per compiled forward" in r.stdout
    runs = c.search_runs([exp.experiment_id])
    (compiled_run,) = [x for x in runs if x.data.tags.get("kind") == "tune_model" and " eval compiled " in x.info.run_name]
    assert not [x for x in runs if x.data.tags.get("mlflow.parentRunId") == compiled_run.info.run_id]  # no sweeps
    assert compiled_run.data.params["compile"] == "True"
    written = pins.load(tmp_path / "pins.yaml")
    for k in KEYS:
        held = pins.pinned_value(written, "interpreter", k + "+compiled")
        assert (held is not None) == (k in on_kernel), (k, held)
        assert pins.pinned_value(written, "interpreter", k) == pins.pinned_value(plain, "interpreter", k)


@pytest.mark.slow
def test_autocast_tunes_the_calls_autocast_makes_in_its_dtype(tmp_path, store):
    """autocast=true dtype=float16 (the interpreter's 16-bit dtype): the float32 model runs under torch.autocast, its
    convolutions are float16 calls, swept, promoted and keyed as float16 problems."""
    r = tune_model(tmp_path, store, "autocast=true", "dtype=float16", "shapes=1")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    key = KEYS[0].replace("-float32/", "-float16/")
    assert "b1 nchw eval float16 autocast · interpreter" in r.stdout and f"[1/1] {key} (2 layer(s): 2, 4): " in r.stdout
    c = MlflowClient(store)
    (exp,) = [e for e in c.search_experiments() if e.name == "tune_model tests.tiny_models:two_shapes [interpreter]"]
    runs = c.search_runs([exp.experiment_id])
    (model_run,) = [x for x in runs if x.data.tags.get("kind") == "tune_model"]
    assert (model_run.data.params["dtype"], model_run.data.params["autocast"]) == ("float16", "True")
    assert list(k for k in model_run.data.tags if k.startswith("done/")) == [f"done/{key}"]
    measured = [x for x in runs if "problem.dtype" in x.data.params]
    assert measured and {x.data.params["problem.dtype"] for x in measured} == {"float16"}
    assert {x.data.params["precision"] for x in measured} == {"tf32"}


@pytest.mark.slow
def children(pid):
    """The pids of a process's children, from /proc."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:  # gone meanwhile
            continue
        if int(fields[1]) == pid:
            found.append(int(stat.parent.name))
    return found


def cmdline(pid):
    return Path(f"/proc/{pid}/cmdline").read_bytes()


def test_a_ctrl_c_during_a_shapes_sweep_leaves_nothing_running(tmp_path, store):
    """Ctrl-C at a terminal reaches tune_model.py and the shape's run.py alike (one process group): the job's run,
    the shape's sweep and the model's run all end KILLED, and tune_model.py exits 130."""
    import signal
    import time

    marker = tmp_path / "paused"
    env = {**os.environ, "TRITON_INTERPRET": "1", "HYDRA_FULL_ERROR": "0", "CONVTUNE_PAUSE_AT": "job_running",
           "CONVTUNE_PAUSE_FILE": str(marker)}
    cmd = [sys.executable, "tune_model.py", "model=tests.tiny_models:two_shapes", "input=[3,6,6]", "batch=1",
           "device=interpreter", f"tracking.uri={store}", f"pins_file={tmp_path / 'pins.yaml'}",
           f"hydra.run.dir={tmp_path / 'out'}"]
    proc = preloaded.popen(cmd, cwd=ROOT, env=env, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 300
        while not marker.exists() and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.05)
        assert marker.exists(), "the first shape's first job never reached its pause point"
        # the shape's run.py is forked from the server that imported torch and MLflow once (convtune.forked)
        (server,) = [p for p in children(proc.pid) if b"multiprocessing.forkserver" in cmdline(p)]
        assert b"torch" in cmdline(server) and b"mlflow" in cmdline(server) and children(server)
        os.killpg(proc.pid, signal.SIGINT)  # what a terminal's Ctrl-C does
        out, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 130, out[-3000:]
    c = MlflowClient(store)
    runs = c.search_runs([e.experiment_id for e in c.search_experiments()])
    assert runs and not [x.info.run_name for x in runs if x.info.status == "RUNNING"]
    (model_run,) = [x for x in runs if x.data.tags.get("kind") == "tune_model"]
    assert model_run.info.status == "KILLED" and model_run.data.tags["status"] == "killed"
    assert {x.info.status for x in runs if x.data.tags.get("mlflow.parentRunId") == model_run.info.run_id} == {"KILLED"}


def test_bad_settings_are_one_line_before_anything_runs(tmp_path):
    from hydra import compose, initialize_config_dir

    from convtune.config import register_configs
    from convtune.errors import ConfigError
    from convtune.tune.model import load_model, run_tune_model

    register_configs()
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        def cfg(*overrides):
            return compose("tune_model", overrides=["model=tests.tiny_models:two_shapes", "device=interpreter",
                                                    f"tracking.uri=sqlite:///{tmp_path / 'm.db'}",
                                                    f"pins_file={tmp_path / 'pins.yaml'}", *overrides])
        for overrides, says in ((["turns=1"], "turns=1 is not allowed: an integer >= 2"),
                                (["shapes=0"], "shapes=0 is not allowed"),
                                (["input=[3,6]"], "one sample's shape [C, H, W]"),
                                ([], "input=None is not allowed: one sample's shape [C, H, W]: "
                                     "tests.tiny_models:two_shapes is not a torchvision model"),
                                (["input=[3,6,6]", "device=auto"], "device='auto' is not allowed: cuda, on a CUDA GPU"),
                (["input=[3,6,6]", "compile=true", "train=true"], "compile=True is not allowed: false with train=true"),
                (["input=[3,6,6]", "fold_bn=true", "train=true"], "fold_bn=True is not allowed: false with train=true "
                 "or compile=true"),
                (["input=[3,6,6]", "fold_bn=true", "compile=true"], "fold_bn=True is not allowed"),
                (["input=[3,6,6]", "autocast=true", "dtype=float32"],
                 "dtype='float32' is not allowed: bfloat16 or float16 with autocast=true")):
            with pytest.raises(ConfigError, match=None) as e:
                run_tune_model(cfg(*overrides), ROOT, tmp_path / "out")
            assert says in str(e.value), (overrides, str(e.value))
    with pytest.raises(ConfigError) as e:
        load_model("tests.tiny_models:three_shapes")
    assert "importable from here" in str(e.value)
    # a factory that raises, one that returns no module, an input the model does not take: one line each
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        for model, extra, says in (
                ("tests.tiny_models:raises", [], "model='tests.tiny_models:raises' is not allowed: a factory that "
                 "builds the model when called with no arguments; it raised RuntimeError: no weights here"),
                ("tests.tiny_models:not_a_module", [], "model='tests.tiny_models:not_a_module' is not allowed: a "
                 "factory that returns a torch.nn.Module; it returned a dict"),
                ("tests.tiny_models:two_shapes", ["input=[5,6,6]"], "input=[5, 6, 6] is not allowed: one sample's "
                 "shape [C, H, W] that the model takes; a batch of [1, 5, 6, 6] raised RuntimeError: ")):
            c = compose("tune_model", overrides=[f"model={model}", "device=interpreter", "batch=1",
                                                 f"tracking.uri=sqlite:///{tmp_path / 'm.db'}",
                                                 f"pins_file={tmp_path / 'pins.yaml'}", "input=[3,6,6]", *extra])
            with pytest.raises(ConfigError) as e:
                run_tune_model(c, ROOT, tmp_path / "out")
            assert str(e.value).startswith(says) and "\n" not in str(e.value), str(e.value)
    assert not (tmp_path / "m.db").exists()  # refused before the store was opened


def test_a_parent_run_must_be_a_run_of_the_experiment_written_to(store):
    from convtune.errors import ConfigError
    from convtune.track.store import Tracker, outer_run

    tracker = Tracker(store)
    here, there = tracker.experiment_id("a"), tracker.experiment_id("b")
    run = tracker.start_run(here, "model", {})
    assert outer_run(tracker, run, here) == run and outer_run(tracker, None, here) is None
    for bad, experiment in ((run, there), ("0123456789abcdef0123456789abcdef", here)):
        with pytest.raises(ConfigError) as e:
            outer_run(tracker, bad, experiment)
        assert str(e.value).startswith(f"tracking.parent_run='{bad}' is not allowed: the id of a run in {store}")


def test_turns_balance_the_order_and_the_ratio_says_faster_only_when_its_interval_is_below_one():
    from convtune.measure import ab

    order = []

    def step(name, seconds):
        def run():
            order.append(name)
            return seconds
        return run

    times = ab.take_turns({"a": step("a", 2.0), "b": step("b", 1.0), "c": step("c", 2.0)}, turns=6, warmup=1)
    assert order[:3] == ["a", "b", "c"]  # the warm-up, untimed
    turns = [order[3 + 3 * i: 6 + 3 * i] for i in range(6)]
    assert all(sorted(t) == ["a", "b", "c"] for t in turns)  # each step once a turn
    # over 2n turns (n odd) each step runs after each other step twice and in each position twice
    assert Counter((t[i], t[i + 1]) for t in turns for i in range(2)) == {
        (x, y): 2 for x in "abc" for y in "abc" if x != y}
    assert Counter((t[i], i) for t in turns for i in range(3)) == {(x, i): 2 for x in "abc" for i in range(3)}
    assert times == {"a": [2.0] * 6, "b": [1.0] * 6, "c": [2.0] * 6}
    faster = ab.ratio(times, "b", "a")
    assert (faster.median, faster.low, faster.high) == (0.5, 0.5, 0.5) and faster.faster
    same = ab.ratio(times, "c", "a")
    assert same.median == 1.0 and not same.faster  # not faster: the interval does not lie below 1
    mixed = ab.ratio({"x": [0.9, 1.1, 0.95, 1.05], "y": [1.0] * 4}, "x", "y")
    assert mixed.low < 1.0 < mixed.high and not mixed.faster
    with pytest.raises(ValueError, match="turns=1"):
        ab.take_turns({"a": step("a", 1.0)}, turns=1, warmup=0)


def test_a_torchvision_name_without_a_working_torchvision_is_one_line(tmp_path, monkeypatch):
    """Missing, or built for another torch (PyPI's beside the CPU build: RuntimeError at import), it was a traceback."""
    import importlib

    from convtune.errors import ConfigError
    from convtune.tune.model import load_model

    broken = tmp_path / "torchvision"
    broken.mkdir()
    (broken / "__init__.py").write_text('raise RuntimeError("operator torchvision::nms does not exist")\n')
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "torchvision", raising=False)
    importlib.invalidate_caches()
    with pytest.raises(ConfigError) as e:
        load_model("resnet50")
    assert str(e.value) == ("model='resnet50' is not allowed: package.module:factory; a torchvision name needs "
                            "torchvision built for this torch (it does not import: RuntimeError: operator "
                            "torchvision::nms does not exist; README: Install)")
    monkeypatch.setitem(sys.modules, "torchvision", None)  # not installed
    with pytest.raises(ConfigError, match=r"built for this torch \(not installed; README: Install\)$"):
        load_model("resnet50")


@pytest.mark.parametrize("pinned", ["fused", "folded"])
def test_fold_bn_times_the_fused_and_folded_calls_the_converted_model_makes_against_torchs_model(
        tmp_path, monkeypatch, pinned):
    """fold_bn=true: the shapes are the calls of the model converted with fold_bn_layers (the first layer's fused
    conv+bn+relu problem, the second's folded convolution), and the end-to-end step times torch's own model (its batch
    norms and ReLU torch's) against the converted model with and without each layer's kernel: a layer that folds runs
    torch's convolution by hold_torch, its batch norm still folded. Every step's output is torch's model's, whichever
    way it ran (Triton's interpreter for the kernels). A fused layer whose fused problem runs torch but whose folded
    convolution is pinned to a kernel is timed under the folded problem's key. The pin a shape ends with is what its
    row says."""
    from omegaconf import OmegaConf

    from convtune import pins
    from convtune.config import TuneModelConfig
    from convtune.kernels import Meta
    from convtune.library import dispatch
    from convtune.tune.model import distinct_shapes
    from convtune.tune.end_to_end import end_to_end
    from tests.tiny_models import conv_bn_relu

    f = own_pins(tmp_path, monkeypatch)
    model = conv_bn_relu().eval()
    ref = conv_bn_relu().eval()
    x = torch.rand(1, 3, 6, 6)
    shapes = distinct_shapes(model, x, None, fold_bn=True)
    keys = {s.problem.key(): s.layers for s in shapes}
    fused_key = "n1-c3-h6-w6-k4-r3x3-s1x1-p1x1-d1x1-g1-bias-nchw-float32-then-relu"
    assert keys == {fused_key: ["0"], "n1-c4-h6-w6-k4-r3x3-s1x1-p1x1-d1x1-g1-bias-nchw-float32": ["3"]}
    timed = fused_key if pinned == "fused" else fused_key[: -len("-then-relu")]
    pins.write_pin(f, "interpreter", "implicit_gemm", pins.pin_key(timed, "tf32"),
                   pins.KernelPin("implicit_gemm", Meta(16, 16, 16, 4, 2)), {"rule": "test"})
    dispatch.forget()
    outputs = []
    model.register_forward_hook(lambda m, args, out: outputs.append(out.detach().clone()))
    cfg = OmegaConf.merge(OmegaConf.structured(TuneModelConfig), {"model": "tiny", "fold_bn": True, "turns": 2,
                                                                  "warmup": 0})
    try:
        table, _, dropped = end_to_end(model, x, cfg, shapes, "tf32", "interpreter", f)
    finally:
        dispatch.forget()
    assert f"| without {timed} |" in table and table.count("| without ") == 1, table
    with torch.no_grad():
        want = ref(x)
    assert len(outputs) >= 3 * 2 + 1  # convert's example forward, then torch, converted and without, 2 turns each
    for got in outputs:
        torch.testing.assert_close(got, want, rtol=2e-3, atol=2e-3)  # tf32: the kernel rounds to TF32
    row = next(line for line in table.splitlines() if line.startswith(f"| without {timed} |"))
    held = pins.pinned_value(pins.load(f), "interpreter", pins.pin_key(timed, "tf32"))
    assert (held == pins.TORCH) == ("torch pinned" in row) == (dropped == [pins.pin_key(timed, "tf32")]), row


def test_a_fused_shapes_overrides_give_run_py_that_problem():
    """tune_model.py hands each shape to `run.py +experiment=candidates` as overrides of problem=tiny: composed by
    Hydra, a fused shape's are the same problem, its epilogue included (and an unfused one's an empty chain)."""
    from convtune.problem import ConvProblem
    from convtune.tune.model import shape_overrides
    from tests.conftest import compose

    for chain in (("add", "relu"), ()):
        p = ConvProblem("layer", 2, 8, 6, 6, 16, 1, 1, (1, 1), (0, 0), (1, 1), 1, True, init="randn",
                        layout="channels_last", epilogue=chain)
        cfg = compose("problem=tiny", *shape_overrides(p, "layer"))
        assert ConvProblem.from_mapping(cfg.problem).key() == p.key()
