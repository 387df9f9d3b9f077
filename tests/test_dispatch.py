"""What the library runs (library/dispatch.py): the overlay, this GPU's pin, a family pin verified on first
use, tuning on first use, else torch; the overlay refused whole where broken or foreign. The first-use contests run
for real here, through the Triton interpreter on CPU host times (the GPU machine runs them on the GPU)."""

import logging
import re

import pytest
import torch

import convtune
from convtune.kernels import Meta
from convtune import pins
from convtune.library import dispatch, first_use
from convtune.pins import overlay
from convtune.problem import ConvProblem

H200, H100, ADA = "NVIDIA H200", "NVIDIA H100 80GB HBM3", "NVIDIA GeForce RTX 4090"
# a call small enough for the interpreter: 1x3x8x8, 4 channels out, 3x3, stride 1
P = ConvProblem("", 1, 3, 8, 8, 4, 3, 3, (1, 1), (1, 1), (1, 1), 1, True, layout="nchw")
KEY = pins.pin_key(P.key(), "ieee")
PIN = Meta(16, 16, 16, 4, 2)


@pytest.fixture
def pinned_on_h200(tmp_path, monkeypatch):
    """A pins file with the H200's pin for P (and its compute capability), and an overlay folder of the test's own."""
    f = tmp_path / "pins.yaml"
    pins.write_pin(f, H200, "implicit_gemm", KEY, PIN, {"run_id": "r1"}, capability=(9, 0))
    monkeypatch.setenv(pins.ENV_VAR, str(f))
    monkeypatch.setenv(overlay.ENV, str(tmp_path / "overlay"))
    monkeypatch.delenv(dispatch.TUNE_ENV, raising=False)
    monkeypatch.delenv(dispatch.FAMILY_ENV, raising=False)
    return f


def test_a_pin_of_the_same_compute_capability_or_a_listed_family_is_a_family_pin(pinned_on_h200):
    c = dispatch.decide(P, H100, (9, 0), "ieee", files=[pinned_on_h200], first_use_on=False)
    assert (c.rule, c.value) == ("family", pins.KernelPin("implicit_gemm", PIN))
    assert "family pin NVIDIA H200 / implicit_gemm" in c.source and "compute capability 9.0" in c.source
    assert dispatch.decide(P, ADA, (8, 9), "ieee", files=[pinned_on_h200], first_use_on=False).rule == "torch"  # another capability
    assert dispatch.decide(P, H200, (9, 0), "ieee", files=[pinned_on_h200], first_use_on=False).rule == "pin"
    data = pins.load(pinned_on_h200)
    data["families"] = {"ours": [ADA, H200]}  # a maintainer's table joins the 4090 to the H200's pins
    assert pins.family_sources(data, ADA, (8, 9)) == [H200]


def test_a_family_pin_is_checked_once_on_first_use_and_the_outcome_kept(pinned_on_h200, caplog):
    """The first decision runs the contest (here on CPU host times, through the interpreter) and keeps its outcome,
    whichever it is, in the overlay; the next decision reads the overlay and runs no contest."""
    with caplog.at_level(logging.INFO, logger="convtune.library.dispatch"):
        value, source = (lambda d: (d.value, d.source))(dispatch.decide(P, H100, (9, 0), "ieee", False, torch.device("cpu")))
    verdict = "verified here" if value != pins.TORCH else "refused here"
    assert value in (pins.TORCH, pins.KernelPin("implicit_gemm", PIN)) and verdict in source
    assert "M16-N16-K16-w4-s2" in source and "torch" in source  # the contest's numbers, or why it lost
    assert "family pin NVIDIA H200" in caplog.text and "kept in" in caplog.text
    entry = pins.pin_for(pins.load(overlay.path_for(H100)), H100, KEY)[1]
    assert pins.pinned_value(pins.load(overlay.path_for(H100)), H100, KEY) == value
    prov = entry["provenance"]
    assert prov["rule"] == f"family pin of NVIDIA H200, {verdict}" and prov["from_gpu"] == H200
    assert prov["family_pin"] == "implicit_gemm M16-N16-K16-w4-s2" and prov["seconds"] >= 0 and prov["reason"]
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="convtune.library.dispatch"):
        again, why = (lambda d: (d.value, d.source))(dispatch.decide(P, H100, (9, 0), "ieee", False, torch.device("cpu")))
    assert again == value and why.startswith("overlay ") and f"family pin of NVIDIA H200, {verdict}" in why
    assert caplog.text == ""  # no second contest


@pytest.mark.parametrize("won", [True, False], ids=["kernel won", "torch won"])
def test_a_family_pins_verdict_decides_the_call_and_is_kept_as_such(pinned_on_h200, monkeypatch, won):
    """Each verdict of the first-use contest, made certain by a contest that returns it: the kernel runs only where it
    won, and the overlay keeps that verdict under the key (the real contest's timing decides which one comes, above)."""
    pin = pins.KernelPin("implicit_gemm", PIN)
    monkeypatch.setattr(first_use, "contest", lambda p, precision, device, candidates, budget: (
        (candidates[0], "M16-N16-K16-w4-s2 1.500x torch", 0.1, {"speedup_vs_torch": 1.5}) if won
        else (None, "M16-N16-K16-w4-s2: 2.0000 ms against torch 1.0000 ms", 0.1, {})))
    d = dispatch.decide(P, H100, (9, 0), "ieee", False, torch.device("cpu"))
    verdict = "verified here" if won else "refused here"
    assert (d.value, d.rule) == ((pin if won else pins.TORCH), "family") and verdict in d.source
    kept = pins.load(overlay.path_for(H100))
    assert pins.pinned_value(kept, H100, KEY) == (pin if won else pins.TORCH)
    assert pins.pin_for(kept, H100, KEY)[1]["provenance"]["rule"] == f"family pin of NVIDIA H200, {verdict}"
    again = dispatch.decide(P, H100, (9, 0), "ieee", False, torch.device("cpu"))
    assert again.value == d.value and again.rule == "overlay"


def test_a_family_pin_runs_where_the_overlay_says_it_was_verified(pinned_on_h200):
    pins.write_pin(overlay.path_for(H100), H100, "implicit_gemm", KEY, PIN,
                   {"rule": "family pin of NVIDIA H200, verified here", "speedup_vs_torch": 1.9})
    value, source = (lambda d: (d.value, d.source))(dispatch.decide(P, H100, (9, 0), "ieee", False, torch.device("cpu")))
    assert value == pins.KernelPin("implicit_gemm", PIN) and "verified here" in source


def test_without_an_overlay_a_family_pin_is_not_verified_and_torch_runs(pinned_on_h200, monkeypatch):
    monkeypatch.setenv(overlay.ENV, "off")
    value, source = (lambda d: (d.value, d.source))(dispatch.decide(P, H100, (9, 0), "ieee", False, torch.device("cpu")))
    assert value == pins.TORCH and "not verified on NVIDIA H100 80GB HBM3" in source
    monkeypatch.setenv(overlay.ENV, str(pinned_on_h200.parent / "overlay"))
    monkeypatch.setenv(dispatch.FAMILY_ENV, "off")
    assert dispatch.decide(P, H100, (9, 0), "ieee", False, torch.device("cpu")).value == pins.TORCH
    assert not overlay.path_for(H100).exists()


@pytest.mark.parametrize("text, why", [
    ("pins:\n  NVIDIA H100 80GB HBM3: [\n", "not valid YAML"),
    (f"pins:\n  {H200}:\n    implicit_gemm:\n      {KEY}:\n        meta: {{BLOCK_M: 16, BLOCK_N: 16, BLOCK_K: 16, "
     "num_warps: 4, num_stages: 2}\n", "holds pins of NVIDIA H200"),
])
def test_a_broken_or_foreign_overlay_is_refused_in_one_line_and_ignored_whole(pinned_on_h200, monkeypatch, caplog,
                                                                               text, why):
    path = overlay.path_for(H100)
    path.parent.mkdir(parents=True)
    path.write_text(text)
    monkeypatch.setenv(overlay.ENV, str(path.parent))
    with caplog.at_level(logging.WARNING, logger="convtune.pins.overlay"):
        data, where = overlay.read(H100)
        overlay.read(H100)  # the same file again: no second warning
    assert data == {"pins": {}} and where == path
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1 and why in lines[0] and "ignored whole" in lines[0] and "\n" not in lines[0]
    assert overlay.keep(H100, "implicit_gemm", KEY, pins.TORCH, {}) is None and path.read_text() == text


def test_an_overlay_that_cannot_be_written_advises_the_overlays_own_setting(pinned_on_h200, monkeypatch, caplog):
    """The warning once advised `pins_file=`, which no command of the library's first use has."""
    blocker = pinned_on_h200.parent / "a-file"
    blocker.write_text("")
    monkeypatch.setenv(overlay.ENV, str(blocker / "overlay"))  # a folder that cannot be made
    with caplog.at_level(logging.WARNING, logger="convtune.pins.overlay"):
        assert overlay.keep(H100, "implicit_gemm", KEY, pins.TORCH, {}) is None
    (line,) = [r.getMessage() for r in caplog.records]
    assert "takes no new file" in line and f"set {overlay.ENV} to a writable folder, or to off" in line
    assert "pins_file" not in line


@pytest.mark.parametrize("env, value, allowed", [(dispatch.BUDGET_ENV, "soon", "a number of seconds >= 0"),
                                                 (dispatch.BUDGET_ENV, "-1", "a number of seconds >= 0"),
                                                 (dispatch.FAMILY_ENV, "maybe", "one of 1/true/yes/on (on) or "
                                                                                "0/false/no/off (off)")])
def test_a_bad_setting_is_refused_naming_the_variable_the_value_and_what_is_allowed(monkeypatch, env, value, allowed):
    from convtune.errors import ConfigError

    monkeypatch.setenv(env, value)
    with pytest.raises(ConfigError, match=rf"{env}='{value}' is not allowed: {re.escape(allowed)}"):
        dispatch.budget_s() if env == dispatch.BUDGET_ENV else dispatch.family_checks()


def test_yes_and_no_settings_are_read_strictly(monkeypatch):
    """`CONVTUNE_TUNE=false`, `off`, `no` and `0.0` once turned tuning on (anything but "" and "0" did)."""
    from convtune.errors import ConfigError

    for value, on in (("1", True), ("true", True), ("Yes", True), ("ON", True), ("0", False), ("false", False),
                      ("off", False), ("No", False), ("", False)):
        monkeypatch.setenv(dispatch.TUNE_ENV, value)
        assert dispatch.tuning() is on, value
        monkeypatch.setenv(dispatch.FAMILY_ENV, value)
        assert dispatch.family_checks() is (on or value == ""), value  # unset or empty: on, its default
    for value in ("0.0", "2", "maybe", "tru"):
        monkeypatch.setenv(dispatch.TUNE_ENV, value)
        with pytest.raises(ConfigError, match=rf"^CONVTUNE_TUNE='{value}' is not allowed: one of 1/true/yes/on \(on\) "
                                              r"or 0/false/no/off \(off\)$"):
            dispatch.tuning()


def test_tuning_on_first_use_is_off_by_default_and_on_by_the_switch_or_the_environment(pinned_on_h200, monkeypatch):
    assert not dispatch.tuning()
    monkeypatch.setenv(dispatch.TUNE_ENV, "1")
    assert dispatch.tuning()
    convtune.tune_on_first_use(False)  # the API's switch wins over the environment
    try:
        assert not dispatch.tuning()
    finally:
        dispatch._tune = None


def test_tuning_on_first_use_contests_the_kernels_that_take_the_call_within_its_budget(pinned_on_h200, monkeypatch,
                                                                                         caplog):
    other = ConvProblem("", 1, 3, 8, 8, 4, 3, 3, (1, 1), (1, 1), (1, 1), 1, False, layout="nchw")  # no pin anywhere
    candidates = first_use.candidates(other, "ieee", (9, 0))
    names = {c.kernel for c in candidates}
    assert "implicit_gemm" in names and "fused_gluon" not in names  # fused_gluon refuses 3x3 at stride 1
    assert "implicit_gemm" in {c.kernel for c in first_use.candidates(other, "ieee", None)}
    assert "nchw_igemm" not in {c.kernel for c in first_use.candidates(other, "ieee", (8, 9))}  # tf32 only
    monkeypatch.setenv(dispatch.BUDGET_ENV, "0")  # the budget stops the contest after its first candidate
    convtune.tune_on_first_use(True)
    try:
        with caplog.at_level(logging.INFO, logger="convtune.library.dispatch"):
            value, source = (lambda d: (d.value, d.source))(dispatch.decide(other, H100, (9, 0), "ieee", False, torch.device("cpu")))
    finally:
        dispatch._tune = None
    assert source.startswith("tuned on first use on NVIDIA H100 80GB HBM3")
    assert f"budget of 0 s spent after 1 of {len(candidates)}" in source
    entry = pins.pin_for(pins.load(overlay.path_for(H100)), H100, pins.pin_key(other.key(), "ieee"))[1]
    assert entry["provenance"]["rule"] == "tuned on first use" and entry["provenance"]["candidates"] == len(candidates)
    assert "tuned" in caplog.text and "candidates" in caplog.text
    [said] = [r.getMessage() for r in caplog.records if "tuned" in r.getMessage()]
    assert "on this call alone" in said and "tune_model.py decides in the model (compile=true" in said, said
    compiled = dispatch.decide(other, H100, (9, 0), "ieee", compiled=True)  # the eager winner is not the graph's
    assert compiled.value == pins.TORCH and "tune_model.py compile=true" in compiled.source


def test_tuning_on_first_use_for_a_training_call_keeps_its_winner_under_the_plain_key(pinned_on_h200, monkeypatch):
    """The first-use contest times forward calls: what it finds is no "+train" measurement, so the training call
    that started it runs torch whatever won."""
    other = ConvProblem("", 1, 3, 8, 8, 4, 3, 3, (1, 1), (1, 1), (1, 1), 1, False, layout="nchw")
    monkeypatch.setenv(dispatch.BUDGET_ENV, "0")
    convtune.tune_on_first_use(True)
    try:
        value, _ = (lambda d: (d.value, d.source))(dispatch.decide(other, H100, (9, 0), "ieee", True, torch.device("cpu")))
    finally:
        dispatch._tune = None
    kept = [k for section in pins.load(overlay.path_for(H100))["pins"][H100].values() for k in section]
    assert kept == [pins.pin_key(other.key(), "ieee")] and value == pins.TORCH


TRAIN_KEY = pins.pin_key(P.key(), "ieee", training=True)
TRAIN_PIN = Meta(32, 16, 16, 4, 2)


def test_a_training_call_runs_a_kernel_only_under_a_train_pin(pinned_on_h200):
    """A plain pin was measured on forward calls: in training its kernel gives way to torch, and the source says
    why; a "+train" pin's kernel runs; without gradients the plain pin decides as before."""
    value, source = (lambda d: (d.value, d.source))(dispatch.decide(P, H200, (9, 0), "ieee", True, torch.device("cpu")))
    assert value == pins.TORCH and source.startswith("torch in training: pin NVIDIA H200 / implicit_gemm / " + KEY)
    assert "M16-N16-K16-w4-s2" in source and '"+train" pin' in source
    assert dispatch.decide(P, H200, (9, 0), "ieee", False, torch.device("cpu")).value == pins.KernelPin(
        "implicit_gemm", PIN)
    pins.write_pin(pinned_on_h200, H200, "implicit_gemm", TRAIN_KEY, TRAIN_PIN, {"run_id": "r2"})
    value, source = (lambda d: (d.value, d.source))(dispatch.decide(P, H200, (9, 0), "ieee", True, torch.device("cpu")))
    assert value == pins.KernelPin("implicit_gemm", TRAIN_PIN) and source.endswith(TRAIN_KEY)


def test_a_plain_kernel_pin_in_the_overlay_or_a_family_runs_torch_in_training_without_a_contest(pinned_on_h200,
                                                                                                  caplog):
    with caplog.at_level(logging.INFO, logger="convtune.library.dispatch"):
        value, source = (lambda d: (d.value, d.source))(dispatch.decide(P, H100, (9, 0), "ieee", True, torch.device("cpu")))
    assert value == pins.TORCH and "torch in training: family pin NVIDIA H200" in source
    assert caplog.text == "" and not overlay.path_for(H100).exists()  # no forward contest for a training call
    pins.write_pin(overlay.path_for(H100), H100, "implicit_gemm", KEY, PIN, {"rule": "tuned on first use"})
    value, source = (lambda d: (d.value, d.source))(dispatch.decide(P, H100, (9, 0), "ieee", True, torch.device("cpu")))
    assert value == pins.TORCH and source.startswith("torch in training: overlay ")


def test_tune_model_s_switch_lets_training_calls_run_the_plain_pin_while_it_measures(pinned_on_h200):

    generation = dispatch.generation
    with dispatch.forward_pins_in_training():
        value, _ = (lambda d: (d.value, d.source))(dispatch.decide(P, H200, (9, 0), "ieee", True, torch.device("cpu")))
        assert value == pins.KernelPin("implicit_gemm", PIN)
    assert dispatch.decide(P, H200, (9, 0), "ieee", True, torch.device("cpu")).value == pins.TORCH
    assert dispatch.generation == generation + 2  # cached decisions dropped on the way in and out
