"""Calls inside torch.compile are decided in their own context (library/dispatch.py): a "+compiled" pin puts
convtune's operator into the graph; a plain pin, measured in eager calls, leaves aten's convolution there for Inductor
to plan. Through the interpreter, with a backend that records the graph dynamo traced."""

import copy
import dataclasses

import pytest
import torch
import torch.nn.functional as F

import convtune
from convtune import pins
from convtune.kernels import Meta
from convtune.library import dispatch, functional
from convtune.pins import overlay
from convtune.problem import ConvProblem

P = ConvProblem("", 2, 3, 9, 9, 5, 3, 3, (1, 1), (1, 1), (1, 1), 1, True, layout="nchw")
META = Meta(16, 16, 16, 4, 2)
KERNEL = pins.KernelPin("implicit_gemm", META)
# the rule as torch 2.13 and later let it be traced; before (functional._SIZES_TELL), a direct call keeps the operator
# in the graph and decides as it runs, as the last test here checks on any torch
SIZES_TELL = pytest.mark.skipif(not functional._SIZES_TELL, reason=f"torch {torch.__version__}: traced sizes do not "
                                "tell static from symbolic, so a direct call keeps the operator (the last test)")


@pytest.fixture
def pins_file(tmp_path, monkeypatch):
    f = tmp_path / "pins.yaml"
    pins.create_empty(f)
    monkeypatch.setenv(pins.ENV_VAR, str(f))
    monkeypatch.setenv(overlay.ENV, str(tmp_path / "overlay"))
    monkeypatch.delenv(dispatch.TUNE_ENV, raising=False)
    monkeypatch.delenv(dispatch.UNPINNED_ENV, raising=False)
    dispatch.forget()
    torch._dynamo.reset()
    yield f
    dispatch.forget()
    torch._dynamo.reset()


def tensors():
    g = torch.Generator().manual_seed(3)
    return torch.rand(2, 3, 9, 9, generator=g), torch.rand(5, 3, 3, 3, generator=g) - 0.5, torch.rand(5, generator=g)


def traced(x, w, b):
    """What dynamo put into the graph for a conv2d then relu, and the compiled output."""
    seen = []

    def recording_backend(gm, example_inputs):
        seen.extend(str(n.target) for n in gm.graph.nodes if n.op == "call_function")
        return gm.forward

    torch._dynamo.reset()
    fn = torch.compile(lambda x, w, b: torch.relu(convtune.conv2d(x, w, b, padding=1)), fullgraph=True,
                       backend=recording_backend)
    return seen, fn(x, w, b)


def pin(f, compiled):
    key = pins.pin_key(P.key(), "tf32", compiled=compiled)
    pins.write_pin(f, "interpreter", "implicit_gemm", key, KERNEL, {"rule": "test"})
    dispatch.forget()


@SIZES_TELL
def test_a_plain_pin_runs_its_kernel_eagerly_and_leaves_torch_in_the_compiled_graph(pins_file):
    pin(pins_file, compiled=False)
    x, w, b = tensors()
    convtune.conv2d(x, w, b, padding=1)
    assert len(functional.cached_plans()) == 1, "the eager call should run the pinned kernel"
    seen, out = traced(x, w, b)
    assert "convtune.conv2d.default" not in seen and any("conv2d" in t for t in seen), seen
    torch.testing.assert_close(out, torch.relu(F.conv2d(x, w, b, padding=1)), rtol=0, atol=0)  # torch's own


def test_a_compiled_pin_puts_convtunes_operator_in_the_graph(pins_file):
    pin(pins_file, compiled=True)
    x, w, b = tensors()
    assert functional.cached_plans() == []
    seen, out = traced(x, w, b)
    assert "convtune.conv2d.default" in seen, seen
    assert len(functional.cached_plans()) == 1, "the operator should have run the kernel"
    torch.testing.assert_close(out, torch.relu(F.conv2d(x, w, b, padding=1)), rtol=1e-2, atol=1e-2)


def test_the_operator_passes_torchs_own_checks_of_a_registered_operator(pins_file):
    """torch.library.opcheck on convtune::conv2d where "+compiled" pins name the kernel in both layouts: the schema,
    the fake implementation's output against the kernel's, the registered autograd and AOT dispatch (a compiled
    forward and backward through the operator) agree. A call that records gradients runs torch inside the operator
    (compiled training calls run torch), so that case checks the autograd registration around torch's convolution."""
    for layout in ("nchw", "channels_last"):
        key = pins.pin_key(dataclasses.replace(P, layout=layout).key(), "tf32", compiled=True)
        pins.write_pin(pins_file, "interpreter", "implicit_gemm", key, KERNEL, {"rule": "test"})
    dispatch.forget()
    x, w, b = tensors()
    for grad in (False, True):
        args = [t.clone().requires_grad_(grad) for t in (x, w, b)]
        torch.library.opcheck(torch.ops.convtune.conv2d.default, (*args, [1, 1], [1, 1], [1, 1], "tf32", grad))
        xc = args[0].detach().to(memory_format=torch.channels_last).requires_grad_(grad)
        torch.library.opcheck(torch.ops.convtune.conv2d.default, (xc, *args[1:], [1, 1], [1, 1], [1, 1], "tf32", grad))
        if not grad:
            assert len(functional.cached_plans()) == 2, "the operator should have run the kernel in both layouts"


@SIZES_TELL
def test_eager_pins_count_in_a_compiled_graph_only_within_eager_pins_in_compile(pins_file):
    pin(pins_file, compiled=False)
    x, w, b = tensors()
    with dispatch.eager_pins_in_compile():
        seen, _ = traced(x, w, b)
    assert "convtune.conv2d.default" in seen, seen
    seen, _ = traced(x, w, b)
    assert "convtune.conv2d.default" not in seen, seen


def test_the_decision_names_its_context(pins_file):
    pin(pins_file, compiled=False)
    eager = dispatch.decide(P, "interpreter", None, "tf32")
    compiled = dispatch.decide(P, "interpreter", None, "tf32", compiled=True)
    train = dispatch.decide(P, "interpreter", None, "tf32", training=True, compiled=True)
    assert (eager.value, eager.context) == (KERNEL, "eager")
    assert (compiled.value, compiled.context, compiled.rule) == (pins.TORCH, "compiled", "torch")
    assert "tune_model.py compile=true" in compiled.source
    assert train.value == pins.TORCH and "records gradients" in train.source
    pin(pins_file, compiled=True)
    compiled = dispatch.decide(P, "interpreter", None, "tf32", compiled=True)
    assert (compiled.value, compiled.context, compiled.key) == (KERNEL, "compiled", P.key() + "/tf32+compiled")


def test_a_compiled_pin_key_is_valid_in_a_pins_file_and_has_no_training_form(tmp_path):
    f = tmp_path / "p.yaml"
    key = pins.pin_key(P.key(), "tf32", compiled=True)
    pins.write_pin(f, "interpreter", "torch", key, pins.TORCH, {"rule": "test"})
    assert pins.pinned_value(pins.load(f), "interpreter", key) == pins.TORCH
    assert pins.context_of(key) == "compiled" and pins.context_of(pins.pin_key(P.key(), "tf32")) == "eager"
    with pytest.raises(ValueError):
        pins.pin_key(P.key(), "tf32", training=True, compiled=True)


def test_convert_reports_what_a_compiled_graph_runs(pins_file):
    pin(pins_file, compiled=False)
    x, w, b = tensors()
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 5, 3, padding=1))
    report = convtune.nn.convert(model, example_input=x)
    [line] = [s.runs for s in report]
    assert line.startswith("convtune implicit_gemm") and "under torch.compile torch" in line, line
    assert not report[0].left, "a layer whose eager calls run a kernel stays convtune's"


def test_tune_model_compile_times_compiled_copies_and_writes_compiled_pins(pins_file):
    """end_to_end with compile=true (tune_model.py's step 4), in process on the interpreter: every configuration is a
    compiled copy of the model (aot_eager here); each shape that ran a kernel gets a "+compiled" pin, its kernel or
    torch as the compiled model was faster or not (CPU times decide which; either is checked), and the plain pins
    stay as they were."""
    from hydra import compose, initialize_config_dir

    from convtune.config import register_configs
    from convtune.tune.end_to_end import end_to_end
    from convtune.tune.model import distinct_shapes
    from tests.conftest import ROOT
    from tests.tiny_models import two_shapes

    register_configs()
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        cfg = compose("tune_model", overrides=["model=tests.tiny_models:two_shapes", "compile=true", "turns=2",
                                               "warmup=0", "device=interpreter", "input=[3,6,6]", "batch=1"])
    torch.manual_seed(0)
    model, x = two_shapes(), torch.randn(1, 3, 6, 6)
    shapes = distinct_shapes(model, x)
    for s in shapes:
        pins.write_pin(pins_file, "interpreter", "implicit_gemm", pins.pin_key(s.problem.key(), "tf32"), KERNEL, {})
    before = pins.load(pins_file)
    dispatch.forget()
    table, numbers, dropped = end_to_end(model, x, cfg, shapes, "tf32", "interpreter", pins_file)
    after = pins.load(pins_file)
    assert len(shapes) == 2 and "decided in compiled context" in table and "torch.compile(model)" in table, table
    assert "| converted |" in table and "compiled, on the eager pins" in table, table
    for s in shapes:
        key = pins.pin_key(s.problem.key(), "tf32", compiled=True)
        section, entry = pins.pin_for(after, "interpreter", key)
        assert entry["provenance"]["context"] == "compiled" and entry["provenance"]["layers"] == s.layers
        assert pins.value_of(section, entry) == (pins.TORCH if key in dropped else KERNEL)
        plain = pins.pin_key(s.problem.key(), "tf32")
        assert pins.pin_for(after, "interpreter", plain) == pins.pin_for(before, "interpreter", plain)
    assert numbers["speedup_vs_torch"] > 0


@SIZES_TELL
def test_a_converted_module_traced_by_compile_follows_the_same_rule(pins_file):
    pin(pins_file, compiled=False)
    x, w, b = tensors()
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 5, 3, padding=1), torch.nn.ReLU())
    with torch.no_grad():
        model[0].weight.copy_(w)
        model[0].bias.copy_(b)
    convtune.nn.convert(model, example_input=x)
    # its eager calls run the kernel: it stays convtune's, of the class whose compiled calls convert decided torch
    assert type(model[0]) is convtune.nn.TracedAsTorch and isinstance(model[0], convtune.nn.Conv2d)
    # convert decided its compiled calls (torch): traced, the layer is torch.nn.Conv2d's forward, no library call
    from convtune.library import nn as library_nn

    def no_library_call(*args, **kwargs):
        raise AssertionError("the library decided again inside the graph")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(library_nn, "conv2d", no_library_call)
        torch._dynamo.reset()
        with torch.no_grad():
            torch.compile(model, fullgraph=True, backend="eager")(x)
    twin = copy.deepcopy(model)
    assert type(twin[0]) is convtune.nn.TracedAsTorch
    for compiled, expect_op in ((False, False), (True, True)):  # the pins change: decided as traced
        pin(pins_file, compiled=compiled)
        assert type(model[0]) is type(twin[0]) is convtune.nn.Conv2d  # no longer convert's decision, copies alike
        seen = []

        def recording_backend(gm, example_inputs):
            seen.extend(str(n.target) for n in gm.graph.nodes if n.op in ("call_function", "call_module"))
            return gm.forward

        torch._dynamo.reset()
        with torch.no_grad():
            out = torch.compile(model, fullgraph=True, backend=recording_backend)(x)
        assert ("convtune.conv2d.default" in seen) == expect_op, (compiled, seen)
        torch.testing.assert_close(out, torch.relu(F.conv2d(x, w, b, padding=1)), rtol=1e-2, atol=1e-2)


def test_symbolic_shapes_keep_the_operator_which_decides_as_it_runs(pins_file):
    """A graph traced for dynamic shapes cannot decide by shape as it is traced: the operator goes in, and decides in
    the compiled context when it runs (torch here: the shape has only a plain pin)."""
    pin(pins_file, compiled=False)
    x, w, b = tensors()
    seen = []

    def recording_backend(gm, example_inputs):
        seen.extend(str(n.target) for n in gm.graph.nodes if n.op == "call_function")
        return gm.forward

    fn = torch.compile(lambda x, w, b: convtune.conv2d(x, w, b, padding=1), dynamic=True, backend=recording_backend)
    before = len(functional.cached_plans())
    out = fn(x, w, b)
    assert "convtune.conv2d.default" in seen, seen
    assert len(functional.cached_plans()) == before  # the operator ran torch: no kernel plan was made
    torch.testing.assert_close(out, F.conv2d(x, w, b, padding=1), rtol=0, atol=0)


@SIZES_TELL
def test_a_compiled_call_that_records_gradients_runs_torch_even_under_a_compiled_pin(pins_file):
    """Compiled training calls run torch (no pin is measured in compiled training): aten's convolution goes into the
    graph where gradients are recorded, and the gradients are torch's."""
    pin(pins_file, compiled=True)
    x, w, b = tensors()
    w.requires_grad_()
    seen = []

    def recording_backend(gm, example_inputs):
        seen.extend(str(n.target) for n in gm.graph.nodes if n.op == "call_function")
        return gm.forward

    torch._dynamo.reset()
    fn = torch.compile(lambda x, w, b: convtune.conv2d(x, w, b, padding=1), fullgraph=True, backend=recording_backend)
    fn(x, w, b).square().sum().backward()
    assert "convtune.conv2d.default" not in seen and functional.cached_plans() == [], seen
    wr = w.detach().clone().requires_grad_()
    F.conv2d(x, wr, b, padding=1).square().sum().backward()
    torch.testing.assert_close(w.grad, wr.grad, rtol=1e-5, atol=1e-5)
    with torch.no_grad():  # the same pin without gradients: the operator
        seen.clear()
        torch._dynamo.reset()
        torch.compile(lambda x, w, b: convtune.conv2d(x, w, b, padding=1), fullgraph=True,
                      backend=recording_backend)(x, w, b)
    assert "convtune.conv2d.default" in seen, seen


@SIZES_TELL
def test_under_autocast_a_call_torch_runs_traces_as_torchs_own_and_a_half_pin_puts_the_operator_in(pins_file):
    """A call the pins leave to torch goes into the graph with the tensors as given, so that autocast casts them as it
    would without convtune (the same graph); a "+compiled" pin of the autocast dtype's key puts the operator in."""
    x, w, b = tensors()

    def graph(fn):
        seen = []

        def recording_backend(gm, example_inputs):  # functions and methods (a cast is a method: .to)
            seen.extend(str(n.target) for n in gm.graph.nodes if n.op in ("call_function", "call_method"))
            return gm.forward
        torch._dynamo.reset()
        with torch.autocast("cpu", dtype=torch.float16):
            out = torch.compile(fn, fullgraph=True, backend=recording_backend)(x, w, b)
        return seen, out

    ours, out = graph(lambda x, w, b: torch.relu(convtune.conv2d(x, w, b, padding=1)))
    theirs, expected = graph(lambda x, w, b: torch.relu(F.conv2d(x, w, b, padding=1)))
    assert ours == theirs and out.dtype == torch.float16, (ours, theirs)
    torch.testing.assert_close(out, expected, rtol=0, atol=0)
    half = ConvProblem("", 2, 3, 9, 9, 5, 3, 3, (1, 1), (1, 1), (1, 1), 1, True, dtype="float16", layout="nchw")
    pins.write_pin(pins_file, "interpreter", "implicit_gemm", pins.pin_key(half.key(), "tf32", compiled=True), KERNEL,
                   {"rule": "test"})
    dispatch.forget()
    ours, out = graph(lambda x, w, b: torch.relu(convtune.conv2d(x, w, b, padding=1)))
    assert "convtune.conv2d.default" in ours and out.dtype == torch.float16, ours
    torch.testing.assert_close(out, expected, rtol=1e-2, atol=1e-2)


def test_where_traced_sizes_do_not_tell_a_direct_call_keeps_the_operator_and_a_converted_layer_traces_as_torch(
        pins_file, monkeypatch):
    """Torch before 2.13 (functional._SIZES_TELL): a direct call inside torch.compile keeps convtune's operator, which
    decides as it runs (here torch: the output is torch's); a layer that convert decided torch for traces as
    torch.nn.Conv2d's forward."""
    monkeypatch.setattr(functional, "_SIZES_TELL", False)
    x, w, b = tensors()
    seen, out = traced(x, w, b)
    assert "convtune.conv2d.default" in seen, seen
    torch.testing.assert_close(out, torch.relu(F.conv2d(x, w, b, padding=1)), rtol=0, atol=0)
    pin(pins_file, compiled=False)  # its eager calls run the kernel: convert keeps it convtune's
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 5, 3, padding=1), torch.nn.ReLU())
    convtune.nn.convert(model, example_input=x)
    assert type(model[0]) is convtune.nn.TracedAsTorch
    graph = []

    def recording_backend(gm, example_inputs):
        graph.extend(str(n.target) for n in gm.graph.nodes if n.op == "call_function")
        return gm.forward
    torch._dynamo.reset()
    with torch.no_grad():
        torch.compile(model, fullgraph=True, backend=recording_backend)(x)
    assert "convtune.conv2d.default" not in graph and any("conv2d" in t for t in graph), graph
