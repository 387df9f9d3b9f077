"""bfloat16 and float16: the dtype key, the judge at KernelBench's half-precision tolerance, the kernels that declare a
16-bit dtype (float16 through the interpreter: it computes bfloat16 wrong), pin keys by dtype, and the library."""

import math

import pytest
import torch
import torch.nn.functional as F

import convtune
from convtune import kernels, pins
from convtune.errors import UnsupportedProblem
from convtune.kernels import VARIANTS, Meta
from convtune.library import dispatch, functional
from convtune.pins import overlay
from convtune.measure.correctness import HALF_ERROR_MARGIN, judge, torch_output
from convtune.measure.one_config import make_epilogue, make_inputs, poisoned_output
from convtune.problem import ConvProblem, for_dtype
from tests.conftest import compose

HALF_KERNELS = sorted(n for n, v in VARIANTS.items() if v.takes_dtype("float16") and v.interpreted)


def test_the_kernels_the_issue_names_take_both_half_precisions_and_the_rest_stay_float32():
    for name in ("implicit_gemm", "fold_igemm", "nhwc_igemm", "nchw_1x1"):
        assert set(VARIANTS[name].dtypes) == {"float32", "bfloat16", "float16"}, name
    assert VARIANTS["seed"].dtypes == ("float32",)
    x, w = torch.rand(1, 4, 6, 6, dtype=torch.float16), torch.rand(4, 4, 3, 3, dtype=torch.float16)
    with pytest.raises(UnsupportedProblem, match="input is float16; the kernel takes float32"):
        VARIANTS["seed"].launch(x, w, None, 1, 1, 1, Meta(16, 16, 16, 4, 1), "tf32")


def test_dtype_is_a_key_of_the_run_and_a_half_problem_records_precision_tf32():
    from convtune.resolve import resolve

    s = resolve(compose("problem=tiny", "dtype=float16", "precision=ieee"))
    s.raise_error()
    assert s.problem.dtype == "float16" and s.precision == "tf32"  # float32's math mode does not apply
    assert s.problem.key().endswith("-nchw-float16") and s.pin_key().endswith("-nchw-float16/tf32")
    assert s.params()["problem.dtype"] == "float16" and s.params()["precision"] == "tf32"
    s32 = resolve(compose("problem=tiny", "precision=ieee"))  # no dtype: the problem file's, float32
    assert s32.problem.dtype == "float32" and s32.precision == "ieee"
    assert s32.pin_key() == s.pin_key().replace("-float16/tf32", "-float32/ieee")
    assert for_dtype("tf32x3", "bfloat16") == "tf32" and for_dtype("tf32x3", "float32") == "tf32x3"


def test_an_unknown_dtype_fails_at_compose_time():
    from hydra.errors import ConfigCompositionException

    with pytest.raises(ConfigCompositionException, match="float64"):
        compose("problem=tiny", "dtype=float64")


def test_a_half_problem_counts_two_bytes_an_element():
    p = ConvProblem("x", 2, 3, 8, 8, 4, 3, 3)
    half = ConvProblem("x", 2, 3, 8, 8, 4, 3, 3, dtype="bfloat16")
    assert half.min_bytes * 2 == p.min_bytes and half.flops == p.flops


def _problem(dtype: str) -> ConvProblem:
    return ConvProblem("t", 2, 5, 12, 12, 7, 3, 3, (1, 1), (1, 1), dtype=dtype)


def test_the_judge_takes_a_right_half_output_and_refuses_one_rounded_inside_or_off_by_more_than_allclose():
    p = _problem("float16")
    x, w, b = make_inputs(p, 0, torch.device("cpu"))
    assert x.dtype == w.dtype == b.dtype == torch.float16
    exact = F.conv2d(x.double(), w.double(), b.double(), p.stride, p.padding)
    right = poisoned_output(p, torch.device("cpu"))
    right.copy_(exact)  # float32-class sums rounded once to float16: what a kernel should give
    v = judge(right, p, x, w, b, "tf32", 2e-3)
    assert v.ok and v.metrics["matches_torch"] == 1.0, v.message
    assert v.metrics["rel_err"] <= HALF_ERROR_MARGIN * v.metrics["torch_rel_err"]
    # the bias added after rounding the sum to float16: inside allclose(1e-2), worse than torch's own error
    inside = (exact - b.double()[:, None, None]).half() + b[:, None, None]
    v = judge(inside.contiguous(), p, x, w, b, "tf32", 2e-3)
    assert v.metrics["matches_torch"] == 1.0 and not v.ok and "worse than torch's own" in v.message, v.message
    assert judge(inside.contiguous(), p, x, w, b, "tf32", 2e-3, check="float64").ok  # float64 alone lets it by
    off = (exact + 0.03).half()  # past atol + rtol·|y| = 1e-2 + 1e-2·|y| wherever |y| < 2
    v = judge(off, p, x, w, b, "tf32", 1.0)
    assert not v.ok and v.metrics["matches_torch"] == 0.0, v.message
    v = judge(off, p, x, w, b, "tf32", 1.0, check="float64")  # float64 alone: the judge's allclose still says it
    assert v.ok and v.metrics["matches_torch"] == 0.0 and "does not match torch" in v.message


def test_where_torchs_own_chain_is_past_the_tolerance_an_output_as_good_as_torchs_passes_and_a_worse_one_fails():
    """bfloat16 `scale,bn,relu` after a 3x1 convolution of 4 channels (seed 30): bn's shift cancels the rounded sum,
    and torch's own chain, rounding each op to bfloat16, is 2.7e-2 from float64, past the dtype's 1e-2."""
    p = ConvProblem("t", 3, 4, 13, 75, 1, 3, 1, (1, 5), (2, 1), bias=True, dtype="bfloat16",
                    epilogue=("scale", "bn", "relu"))
    x, w, b = make_inputs(p, 30, torch.device("cpu"))
    ep = make_epilogue(p, 30, torch.device("cpu"))
    theirs, _ = torch_output(p, x, w, b, "tf32", ep)
    for check in ("float64", "kernelbench"):
        v = judge(theirs.clone(), p, x, w, b, "tf32", 1e-2, check=check, epilogue=ep)
        assert v.metrics["torch_rel_err"] > 1e-2 and v.ok and "past 1e-02 but within" in v.message, (check, v.message)
    worse = (theirs + 0.02 * (theirs != 0)).to(theirs.dtype)  # off by more than allclose, and by more than torch's own error
    v = judge(worse, p, x, w, b, "tf32", 1e-2, check="float64", epilogue=ep)
    assert not v.ok and f"nor {HALF_ERROR_MARGIN}x torch's own" in v.message, v.message


@pytest.mark.parametrize("name", HALF_KERNELS)
@pytest.mark.parametrize("layout", ["nchw", "channels_last"])
def test_each_half_kernel_in_float16_matches_torch_and_is_no_worse_than_it(name, layout):
    """1x1 stride 1 for nchw_1x1's family, a strided 3x3 for the others; the output in float16 and in the call's
    layout."""
    one = VARIANTS[name].restricted_to is not None
    p = ConvProblem("t", 2, 16, 9, 9, 24, 1 if one else 3, 1 if one else 3, (1, 1) if one else (2, 2),
                    (0, 0) if one else (1, 1), dtype="float16", layout=layout)
    x, w, b = make_inputs(p, 3, torch.device("cpu"))
    out = poisoned_output(p, torch.device("cpu"))
    meta = kernels.default_meta(VARIANTS[name], p, "tf32")
    VARIANTS[name].launch(x, w, b, p.stride, p.padding, p.dilation, meta, "tf32", out=out)
    v = judge(out, p, x, w, b, "tf32", 2e-3)
    assert v.ok, v.message
    assert out.dtype == torch.float16 and v.metrics["rel_err"] < 1e-3


def test_bfloat16_is_refused_by_a_kernel_on_the_cpu_and_binaries_are_keyed_by_dtype():
    x, w = torch.rand(1, 4, 6, 6, dtype=torch.bfloat16), torch.rand(4, 4, 3, 3, dtype=torch.bfloat16)
    with pytest.raises(UnsupportedProblem, match="bfloat16 needs a GPU"):
        VARIANTS["implicit_gemm"].launch(x, w, None, 1, 1, 1, Meta(16, 16, 16, 4, 1), "tf32")
    from convtune.kernels.host import alignment_key

    # a bound binary is found by this key: one dtype's binary must never run another's call of the same shape
    a, h = torch.empty(4, dtype=torch.bfloat16), torch.empty(4, dtype=torch.float16)
    assert alignment_key(("k",), torch.device("cpu"), a) != alignment_key(("k",), torch.device("cpu"), h)


KEY = "n2-c8-h10-w10-k16-r3x3-s1x1-p1x1-d1x1-g1-bias-nchw-{}/tf32"


@pytest.fixture
def pins_at(tmp_path, monkeypatch):
    f = tmp_path / "pins.yaml"
    monkeypatch.setenv(pins.ENV_VAR, str(f))
    monkeypatch.setenv(overlay.ENV, overlay.OFF)
    dispatch.forget()
    yield f
    dispatch.forget()


def _layer_inputs(dtype):
    g = torch.Generator().manual_seed(5)
    x = torch.rand(2, 8, 10, 10, generator=g).to(dtype)
    w = ((torch.rand(16, 8, 3, 3, generator=g) - 0.5) / math.sqrt(72)).to(dtype)
    return x, w, torch.rand(16, generator=g).to(dtype)


def test_a_float32_pin_decides_float32_calls_only_and_a_float16_pin_runs_the_kernel_in_float16(pins_at):
    """Old pins keep their meaning (their keys end in -float32): a float16 call of the same shape is not theirs."""
    pins.write_pin(pins_at, "interpreter", "implicit_gemm", KEY.format("float32"),
                   pins.KernelPin("implicit_gemm", Meta(64, 16, 16, 4, 2)), {})
    dispatch.forget()
    x, w, b = _layer_inputs(torch.float16)
    y = convtune.conv2d(x, w, b, 1, 1)
    assert y.dtype == torch.float16 and functional.cached_plans() == []  # torch: no pin for float16
    assert torch.equal(y, F.conv2d(x, w, b, 1, 1))
    d = functional.decision(x, w, True, 1, 1, 1, "tf32")
    assert d.value == pins.TORCH and d.key == KEY.format("float16")
    pins.write_pin(pins_at, "interpreter", "implicit_gemm", KEY.format("float16"),
                   pins.KernelPin("fold_igemm", Meta(64, 16, 16, 4, 2)), {})
    dispatch.forget()
    y = convtune.conv2d(x, w, b, 1, 1)
    (plan,) = functional.cached_plans()
    assert type(plan).__module__.endswith("fold_igemm") and y.dtype == torch.float16
    assert torch.allclose(y.float(), F.conv2d(x, w, b, 1, 1).float(), atol=1e-2, rtol=1e-2)


def test_under_autocast_the_module_computes_in_the_regions_dtype_through_that_dtypes_pin(pins_at):
    pins.write_pin(pins_at, "interpreter", "implicit_gemm", KEY.format("float16"),
                   pins.KernelPin("implicit_gemm", Meta(64, 16, 16, 4, 2)), {})
    dispatch.forget()
    torch.manual_seed(0)
    ref = torch.nn.Conv2d(8, 16, 3, padding=1)
    ours = convtune.nn.Conv2d(8, 16, 3, padding=1)
    ours.load_state_dict(ref.state_dict())
    x = _layer_inputs(torch.float32)[0]
    with torch.autocast("cpu", dtype=torch.float16), torch.no_grad():
        expected, got = ref(x), ours(x)
        again = ours(x)  # the parameters' cast is kept between calls without gradients
    assert expected.dtype == got.dtype == torch.float16 and torch.equal(got, again)
    assert len(functional.cached_plans()) == 1  # the kernel ran, under the float16 key
    assert torch.allclose(got.float(), expected.float(), atol=1e-2, rtol=1e-2)
    assert ours(x).dtype == torch.float32  # outside the region: float32, whose key has no pin (torch)


@pytest.mark.slow
def test_a_sweep_over_dtype_records_each_dtype_and_the_summary_names_it(run_cli, store):
    from tests.test_cli import runs_of

    r = run_cli("-m", "problem=tiny", "bench=fast", "dtype=float32,float16", "precision=ieee")
    assert r.returncode == 0, r.stderr
    _, runs = runs_of(store)
    children = {x.data.params["problem.dtype"]: x for x in runs if "problem.dtype" in x.data.params}
    assert set(children) == {"float32", "float16"}
    assert children["float16"].data.params["precision"] == "tf32" and children["float32"].data.params["precision"] == "ieee"
    assert children["float16"].data.tags["problem_key"].endswith("-float16")
    assert all(x.data.tags["status"] == "ok" for x in children.values())
    assert "| float16 BLOCK_M=" in r.stdout and "| float32 BLOCK_M=" in r.stdout


EXPORTED_HALF_CHECK = (
    "import importlib.util, sys, torch\n"
    "spec = importlib.util.spec_from_file_location('m', sys.argv[1]); m = importlib.util.module_from_spec(spec)\n"
    "spec.loader.exec_module(m)\n"
    "ref = torch.nn.Conv2d(3, 20, 5, stride=(2, 1), padding=(2, 1)).half()\n"
    "x = torch.rand(2, 3, 19, 17).half()\n"
    "y = m.conv2d_triton(x, ref.weight.detach(), ref.bias.detach())\n"  # the Triton kernels (interpreter)
    "assert y.dtype == torch.float16, y.dtype\n"
    "torch.testing.assert_close(y, ref(x), rtol=1e-2, atol=1e-2)\n"
    "print('ok')\n")


@pytest.mark.parametrize("kernel", ["implicit_gemm", "fold_igemm"])
def test_export_of_a_float16_problem_writes_a_file_that_computes_in_float16(capsys, tmp_path, store, kernel):
    import os
    import sys

    from tests import preloaded
    from convtune.tune.export import run_export

    out = tmp_path / "model_new.py"
    assert run_export(compose("problem=tiny", "dtype=float16", f"tracking.uri={store}",
                              f"pins_file={tmp_path / 'pins.yaml'}", "export=kernelbench", f"kernel={kernel}",
                              f"export_path={out}")) == 0
    assert f"tiny, {kernel} " in capsys.readouterr().out
    text = out.read_text()
    assert "# float16 tensors (KernelBench's precision=fp16)" in text and 'PRECISION, ROUND = "tf32", False' in text
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHONPATH")}  # no convtune on the path
    env["TRITON_INTERPRET"] = "1"
    r = preloaded.run([sys.executable, "-c", EXPORTED_HALF_CHECK, str(out)], cwd=tmp_path, env=env, timeout=300)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr


def test_export_refuses_a_dtype_its_kernel_does_not_take(capsys, tmp_path, store, monkeypatch):
    """Every exportable kernel takes the three dtypes, so the refusal is checked on fused_gluon declared as float32
    only (the same variant with a narrower Host)."""
    import dataclasses

    from convtune import kernels
    from convtune.tune.export import run_export

    v = kernels.get_variant("fused_gluon")
    host = dataclasses.replace(v.library, dtypes=("float32",))
    narrow = dataclasses.replace(v, dtypes=None, library=host, launch=host.launch, prepared=host.prepared)
    monkeypatch.setitem(kernels.VARIANTS, "fused_gluon", narrow)
    assert run_export(compose("problem=kernelbench_l1_50", "dtype=bfloat16", f"tracking.uri={store}",
                              f"pins_file={tmp_path / 'pins.yaml'}", "export=kernelbench", "kernel=fused_gluon",
                              f"export_path={tmp_path / 'x.py'}")) == 1
    assert capsys.readouterr().out.strip() == "error: fused_gluon takes float32, not bfloat16: nothing exported"


def test_under_autocast_a_layer_whose_weight_is_made_at_each_call_casts_it_at_each_call(pins_at):
    """A parametrized weight (torch.nn.utils.parametrize) is a new tensor at every call: the module's cast memo must
    tell it from the last one without comparing tensors by value."""
    from torch.nn.utils import parametrize

    pins.create_empty(pins_at)

    class Double(torch.nn.Module):
        def forward(self, w):
            return 2 * w

    torch.manual_seed(0)
    ref = torch.nn.Conv2d(8, 16, 3, padding=1)
    ours = convtune.nn.Conv2d(8, 16, 3, padding=1)
    ours.load_state_dict(ref.state_dict())
    for m in (ref, ours):
        parametrize.register_parametrization(m, "weight", Double())
    x = _layer_inputs(torch.float32)[0]
    with torch.autocast("cpu", dtype=torch.float16), torch.no_grad():
        first, second, expected = ours(x), ours(x), ref(x)
    assert first.dtype == torch.float16 and torch.equal(first, second) and torch.equal(first, expected)
