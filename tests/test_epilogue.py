"""Epilogues: the problem's `epilogue` key, the kernels that fuse a chain (every variant that declares one, through the
interpreter, in float32 and float16, writing either layout), the refusal of the rest, the judge against torch's chain,
the one-image check, and a tracked run of a fused problem."""

import re

import pytest
import torch
import torch.nn.functional as F

from convtune.errors import ConfigError, UnsupportedProblem
from convtune.kernels import VARIANTS, Meta
from convtune.kernels.epilogue import NO_EPILOGUE, Epilogue, code, pack_vectors, torch_chain
from convtune.kernels.selfcheck import agrees
from convtune.measure.correctness import judge
from convtune.measure.one_config import make_epilogue, make_inputs
from convtune.problem import ACTIVATIONS, EPILOGUE_OPS, ConvProblem, parse_epilogue
from tests.conftest import compose

FUSING = sorted(n for n, v in VARIANTS.items() if v.epilogues and v.interpreted)
F16, F32 = torch.float16, torch.float32
# each op alone, in one dtype or the other (verify on a GPU runs every op in every dtype), and chains; scale runs bn's
# branch (its code is bn's: the first test), and reaches a kernel in nhwc_tma's bn_train chain (tests/test_nhwc_tma.py)
CASES = [((op,), (F32, F16)[i % 2]) for i, op in enumerate(EPILOGUE_OPS) if op != "scale"] + [
    (("bn", "add", "relu"), F32), (("bn", "add", "relu"), F16), (("relu", "bias"), F32),
    (("bn", "silu", "add", "gelu"), F16), (("bias", "bn", "leaky_relu", "hardswish", "relu6", "add"), F32)]


def test_the_epilogue_key_reads_a_list_or_a_comma_separated_string_and_refuses_what_no_kernel_could_fuse():
    assert parse_epilogue(["bn", "add", "relu"]) == parse_epilogue("bn, add,relu") == ("bn", "add", "relu")
    assert parse_epilogue("") == parse_epilogue([]) == parse_epilogue(None) == ()
    with pytest.raises(ConfigError, match=r"unknown: \['tanh'\]"):
        parse_epilogue("bn,tanh")
    with pytest.raises(ConfigError, match="at most one `add`"):
        parse_epilogue("add,relu,add")
    with pytest.raises(ConfigError, match="at most 6 ops"):
        parse_epilogue(["relu"] * 7)
    assert code(("bn", "add", "relu")) == 2 | 9 << 4 | 3 << 8  # 4 bits an op, in order
    # bn_train normalizes the convolution's output: first only; it and scale run bn's branch
    with pytest.raises(ConfigError, match="`bn_train` first only"):
        parse_epilogue("relu,bn_train")
    assert code(("bn_train", "scale", "relu")) == 2 | 2 << 4 | 3 << 8


def test_a_training_batch_norm_is_refused_in_16_bits_and_verify_never_draws_one_there():
    from convtune.commands.verify_cases import make_cases

    shape = dict(name="x", batch=2, in_channels=8, height=8, width=8, out_channels=4, kernel_h=3, kernel_w=3,
                 epilogue=["bn_train", "scale"])
    assert ConvProblem.from_mapping(shape).epilogue == ("bn_train", "scale")
    with pytest.raises(UnsupportedProblem, match=r"bn_train in bfloat16 is not judgeable: a batch norm with the batch's"):
        ConvProblem.from_mapping({**shape, "dtype": "bfloat16"})
    fusing = [n for n, v in VARIANTS.items() if v.fuses(("bn_train",))]
    cases = make_cases(fusing, ["tf32"], 1, 0, True, ("float32", "bfloat16", "float16"), fused=40)
    drawn = {(c.dtype, "bn_train" in c.epilogue) for c in cases if c.epilogue}
    assert ("float32", True) in drawn and not {d for d, bn in drawn if bn} - {"float32"}
    assert all(c.epilogue.index("bn_train") == 0 for c in cases if "bn_train" in c.epilogue)


def test_a_fused_problem_has_its_own_key_and_bytes_and_one_without_keeps_the_key_it_had():
    plain = ConvProblem.from_mapping(dict(name="x", batch=2, in_channels=3, height=8, width=8, out_channels=4,
                                          kernel_h=3, kernel_w=3))
    fused = ConvProblem.from_mapping(dict(name="x", batch=2, in_channels=3, height=8, width=8, out_channels=4,
                                          kernel_h=3, kernel_w=3, epilogue=["bn", "add", "relu"]))
    # the key every pin and run of a convolution alone was recorded under
    assert plain.key() == "n2-c3-h8-w8-k4-r3x3-s1x1-p0x0-d1x1-g1-bias-nchw-float32"
    assert fused.key() == plain.key() + "-then-bn.add.relu"
    assert "problem.epilogue" not in plain.params() and fused.params()["problem.epilogue"] == "bn,add,relu"
    # the residual read once, and the bn's scale and shift
    assert fused.min_bytes - plain.min_bytes == 4 * (fused.output_elems + 2 * 4)
    assert fused.flops == plain.flops


GEOMETRY = dict(c=5, h=9, w=11, k=7, kh=3, kw=3, stride=(1, 1), padding=(1, 1), dilation=(1, 1))


def _geometry(name):
    """A small convolution the variant takes: its own family's (KernelVariant.draw_case, a fixed draw) where it is
    restricted, else GEOMETRY."""
    import random

    v = VARIANTS[name] if name else None
    if v is None or v.draw_case is None:
        return GEOMETRY
    case = v.draw_case(random.Random(f"epilogue/{name}"), True)
    return {k: case[k] for k in GEOMETRY}


def _tensors(name, chain, dtype, out_cl, residual_cl, seed=0):
    geo = _geometry(name)
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(2, geo["c"], geo["h"], geo["w"], generator=g).to(dtype)
    w = (torch.randn(geo["k"], geo["c"], geo["kh"], geo["kw"], generator=g) / 6).to(dtype)
    b = torch.randn(geo["k"], generator=g).to(dtype)
    params = [((torch.rand(geo["k"], generator=g) + 0.5).to(dtype), torch.randn(geo["k"], generator=g).to(dtype))
              for _ in chain]
    shape = tuple(F.conv2d(x.float(), w.float(), None, geo["stride"], geo["padding"], geo["dilation"]).shape)
    residual = None
    if "add" in chain:
        residual = torch.randn(shape, generator=g).to(dtype)
        residual = residual.contiguous(memory_format=torch.channels_last) if residual_cl else residual
    out = torch.full(shape, float("nan"), dtype=dtype)
    out = out.contiguous(memory_format=torch.channels_last) if out_cl else out
    return x, w, b, Epilogue(chain, pack_vectors(chain, params), residual), out


def _conv(x, w, b, name, dtype=None):
    geo = _geometry(name)
    dtype = dtype or x.dtype
    return F.conv2d(x.to(dtype), w.to(dtype), b.to(dtype), geo["stride"], geo["padding"], geo["dilation"])


@pytest.mark.parametrize("name", FUSING)
@pytest.mark.parametrize("chain,dtype", CASES, ids=[f"{','.join(c)}-{str(d)[6:]}" for c, d in CASES])
def test_each_fusing_kernel_computes_each_op_and_chain_as_torch_does(name, chain, dtype):
    v = VARIANTS[name]
    if not v.takes_dtype(str(dtype).removeprefix("torch.")) or not v.fuses(chain):
        pytest.skip(f"{name} does not declare {dtype} or {chain}")
    out_cl = len(chain) % 2 == 1  # both layouts of the output, and a residual in the other layout half the time
    x, w, b, ep, out = _tensors(name, chain, dtype, out_cl, residual_cl=not out_cl)
    geo = _geometry(name)
    precision = "ieee" if v.runs_precision("ieee") else "tf32"
    meta = v.default_meta(geo["k"], geo["stride"][1], geo["w"], precision)
    v.launch(x, w, b, geo["stride"], geo["padding"], geo["dilation"], meta, precision, out=out, epilogue=ep)
    ref = torch_chain(_conv(x, w, b, name, torch.float64), ep, torch.float64)
    err = float((out.double() - ref).norm() / ref.norm())
    assert err < (1e-6 if dtype == torch.float32 and precision == "ieee" else 2e-3), err
    # torch's chain at the dtype, which rounds each op's result: in 16 bits the kernel rounds where it does, so that
    # all but a few outputs (gelu's erf is not torch's to the last bit) are torch's own
    theirs = torch_chain(_conv(x, w, b, name, torch.float32).to(dtype), ep)
    assert torch.allclose(out, theirs, atol=1e-2, rtol=1e-2)
    if dtype == torch.float16:
        assert float((out != theirs).float().mean()) < 0.01


def test_every_op_changes_the_output_so_the_op_tests_can_fail():
    x, w, b, _, _ = _tensors("", (), torch.float32, False, False)
    y = _conv(x, w, b, "") * 4  # values past relu6's cap and hardswish's bend too
    for op in EPILOGUE_OPS:
        _, _, _, ep, _ = _tensors("", (op,), torch.float32, False, False)
        assert not torch.allclose(torch_chain(y, ep), y), op


def test_a_kernel_that_fuses_no_epilogue_refuses_one_and_the_tracker_names_those_that_do():
    plain = sorted(n for n, v in VARIANTS.items() if not v.epilogues and v.library is not None)
    assert plain  # the kernels that only add their own bias
    x, w, b, ep, _ = _tensors("", ("bn", "relu"), torch.float32, False, False)
    for name in plain:
        with pytest.raises(UnsupportedProblem, match="fuses no epilogue, not bn, relu"):
            VARIANTS[name].launch(x, w, b, 1, 1, 1, VARIANTS[name].default_meta(7, 1, 11), "tf32", epilogue=ep)
    from convtune.resolve import resolve

    s = resolve(compose("problem=tiny", "problem.epilogue=[bn,relu]", f"kernel={plain[0]}"))
    with pytest.raises(UnsupportedProblem, match=f"kernel {plain[0]} does not fuse the epilogue bn,relu; kernels that "
                                                 f"do: .*implicit_gemm"):
        s.raise_error()


def test_the_tensors_of_an_epilogue_must_fit_the_call():
    x, w, b, ep, _ = _tensors("", ("add",), torch.float32, False, False)
    v, meta = VARIANTS["implicit_gemm"], Meta(32, 16, 16, 4, 2)
    wrong = Epilogue(("add",), None, ep.residual[:, :, :-1])
    with pytest.raises(UnsupportedProblem, match=r"the residual must be a \(2, 7, 9, 11\) torch.float32 tensor"):
        v.launch(x, w, b, 1, 1, 1, meta, "ieee", epilogue=wrong)
    with pytest.raises(UnsupportedProblem, match="residual tensor exactly when its chain has `add`"):
        Epilogue(("relu",), None, ep.residual)
    with pytest.raises(UnsupportedProblem, match=r"epilogue vectors must be a contiguous float \(2, 7\) tensor"):
        v.launch(x, w, b, 1, 1, 1, meta, "ieee", epilogue=Epilogue(("bn",), torch.ones(2, 6)))


def _fused_problem(chain):
    return ConvProblem("f", 2, 3, 9, 10, 6, 3, 3, padding=(1, 1), epilogue=chain)


def test_the_judge_compares_with_torch_running_the_chain_and_fails_an_output_missing_an_op():
    p = _fused_problem(("bn", "add", "relu"))
    dev = torch.device("cpu")
    x, w, b = make_inputs(p, 0, dev)
    ep = make_epilogue(p, 0, dev)
    right = torch_chain(F.conv2d(x.double(), w.double(), b.double(), 1, 1), ep).float()
    assert judge(right, p, x, w, b, "ieee", 1e-5, epilogue=ep).ok
    no_relu = torch_chain(F.conv2d(x.double(), w.double(), b.double(), 1, 1), Epilogue(("bn", "add"), ep.vectors[:4],
                                                                                       ep.residual)).float()
    v = judge(no_relu, p, x, w, b, "ieee", 1e-5, epilogue=ep)
    assert not v.ok and "relative L2 error" in v.message
    with pytest.raises(ValueError, match=r"the problem's epilogue is \['bn', 'add', 'relu'\], the tensors given are "
                                         r"for \[\]"):
        judge(right, p, x, w, b, "ieee", 1e-5)
    # the convolution's own inputs are those of the same problem without an epilogue
    assert all(torch.equal(s, t) for s, t in zip(make_inputs(p, 0, dev)[:2], make_inputs(_fused_problem(()), 0, dev)[:2]))
    assert make_epilogue(_fused_problem(()), 0, dev) is NO_EPILOGUE


def test_the_one_image_check_of_a_fresh_binary_applies_the_chain():
    x, w, b, ep, _ = _tensors("", ("bn", "add", "gelu"), torch.float32, False, False)
    ref = torch_chain(F.conv2d(x.double(), w.double(), b.double(), 1, 1), ep, torch.float64).float()
    assert agrees(ref, x, w, b, (1, 1), (1, 1), (1, 1), "ieee", ep)
    assert not agrees(ref, x, w, b, (1, 1), (1, 1), (1, 1), "ieee")  # the convolution alone is another output
    assert not agrees(ref, x, w, b, (1, 1), (1, 1), (1, 1), "ieee", Epilogue(("bn", "add", "silu"), ep.vectors,
                                                                            ep.residual))


@pytest.mark.slow
def test_a_fused_problem_is_swept_checked_against_torchs_chain_and_promoted_under_its_own_key(run_cli, store, tmp_path,
                                                                                              capsys):
    from convtune.tune.promote import run_promote
    from tests.test_cli import runs_of

    fused = ("problem=tiny", "problem.epilogue=[bn,add,silu]", "precision=ieee")
    r = run_cli("bench=fast", *fused)
    assert r.returncode == 0, r.stderr
    _, runs = runs_of(store)
    (run,) = [x for x in runs if "problem.epilogue" in x.data.params]
    assert run.data.params["problem.epilogue"] == "bn,add,silu" and run.data.tags["status"] == "ok"
    assert run.data.tags["problem_key"].endswith("-float32-then-bn.add.silu")
    assert run.data.tags["torch_reference"].endswith("then bn, add, silu in torch")
    assert run.data.metrics["rel_err"] < 1e-5
    # promote's contest: the kernel on the fused problem against torch running the convolution and then the chain,
    # which is correct only if it ran the chain. min_gain 10000 %: the decision keeps torch whichever times faster
    pins_file = tmp_path / "pins.yaml"
    assert run_promote(compose(*fused, f"tracking.uri={store}", f"pins_file={pins_file}", "promote.rounds=2",
                               "promote.reps=1", "promote.min_gain=100")) == 0
    out = capsys.readouterr().out
    assert "-float32-then-bn.add.silu/ieee) · kernel implicit_gemm" in out
    (torch_row,) = [line for line in out.splitlines() if line.startswith("| unpinned | torch")]
    assert "| torch.nn.functional.conv2d (cuDNN on a GPU), then bn, add, silu in torch |" in torch_row
    (kernel_row,) = [line for line in out.splitlines() if line.startswith("| candidate | implicit_gemm")]
    assert "| yes |" in torch_row and "| yes |" in kernel_row
    assert re.search(r"decision: KEEP: (gain -?[0-9.]+ % < 10000 %|the current holder, torch \(no pin\), is the "
                     r"fastest contender)", out), out
    assert not pins_file.exists()


def test_first_use_and_the_candidates_preset_try_only_kernels_that_fuse_the_epilogue():
    from convtune.library.first_use import candidates

    plain = {c.kernel for c in candidates(_fused_problem(()), "tf32", None, limit=99)}
    fused = {c.kernel for c in candidates(_fused_problem(("bn", "relu")), "tf32", None, limit=99)}
    assert fused == {n for n in plain if VARIANTS[n].fuses(("bn", "relu"))} and fused < plain


def test_activations_are_torchs_defaults():
    y = torch.linspace(-8, 8, 101, dtype=torch.float64).view(1, 1, 1, -1)
    expected = {"relu": F.relu(y), "relu6": F.relu6(y), "silu": F.silu(y), "gelu": F.gelu(y),
                "hardswish": F.hardswish(y), "leaky_relu": F.leaky_relu(y)}
    assert set(expected) == set(ACTIVATIONS)
    for op, want in expected.items():
        assert torch.equal(torch_chain(y, Epilogue((op,))), want), op


LEVEL2_FILE_CHECK = (
    "import importlib.util, os, sys, torch\n"
    "spec = importlib.util.spec_from_file_location('m', sys.argv[1]); m = importlib.util.module_from_spec(spec)\n"
    "spec.loader.exec_module(m)\n"
    "torch.manual_seed(0); model = m.ModelNew(3, 20, 5, (20, 1, 1))\n"  # KernelBench passes its init inputs
    "torch.manual_seed(0); conv = torch.nn.Conv2d(3, 20, 5, stride=(2, 1), padding=(2, 1))\n"
    "bias = torch.randn(20, 1, 1)\n"  # level 2 #1's Model: its bias parameter after the convolution's
    "x = torch.rand(2, 3, 19, 17)\n"
    "want = torch.relu(conv(x)) + bias\n"
    "torch.testing.assert_close(model(x), want)\n"  # CPU: the chain in torch, on the same parameters
    "vectors = torch.zeros(4, 20); vectors[3] = bias.view(-1)\n"
    "y = m.conv2d_triton(x, conv.weight.detach(), conv.bias.detach(), None, vectors)\n"  # the Triton kernel
    "torch.testing.assert_close(y, want.detach(), rtol=2e-3, atol=2e-3)\n"
    "print('ok')\n")


def test_export_of_a_fused_problem_writes_kernelbenchs_level2_model_and_refuses_a_batch_norm(capsys, tmp_path, store):
    import os
    import sys

    from tests import preloaded
    from convtune.tune.export import run_export

    out = tmp_path / "l2.py"
    args = ("problem=tiny", f"tracking.uri={store}", f"pins_file={tmp_path / 'pins.yaml'}", "export=kernelbench",
            "kernel=implicit_gemm", f"export_path={out}")
    assert run_export(compose(*args, "problem.epilogue=[relu,bias]")) == 0
    text = out.read_text()
    assert "EPILOGUE = 19  # relu, bias" in text and "self.bias = nn.Parameter(torch.randn((20, 1, 1)))" in text
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHONPATH")}  # no convtune on the path
    env["TRITON_INTERPRET"] = "1"
    r = preloaded.run([sys.executable, "-c", LEVEL2_FILE_CHECK, str(out)], cwd=tmp_path, env=env, timeout=300)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr[-2000:]
    capsys.readouterr()
    assert run_export(compose(*args, "problem.epilogue=[bn,relu]", f"export_path={tmp_path / 'bn.py'}")) == 1
    assert "KernelBench runs its Models in training mode" in capsys.readouterr().out
    assert not (tmp_path / "bn.py").exists()


def test_a_pins_key_may_name_an_epilogue_of_known_ops_only(tmp_path):
    from convtune import pins
    from convtune.kernels import Meta

    key = _fused_problem(("bn", "add", "relu")).key() + "/tf32"
    pin = pins.KernelPin("implicit_gemm", Meta(16, 16, 16, 4, 2))
    f = tmp_path / "pins.yaml"
    pins.create_empty(f)
    pins.write_pin(f, "interpreter", "implicit_gemm", key, pin, {"rule": "test"})
    assert key in pins.load(f)["pins"]["interpreter"]["implicit_gemm"]
    for wrong in (key.replace("bn.add.relu", "bn.tanh"), key.replace("-then-", "-then")):
        with pytest.raises(pins.PinsError, match="is not a problem key"):
            pins.write_pin(f, "interpreter", "implicit_gemm", wrong, pin, {"rule": "test"})


def test_the_export_checks_reference_model_runs_a_training_batch_norm_and_the_scaling_factor():
    """measure/kbcheck's level-2 Model for #73's chain: conv, nn.BatchNorm2d in training mode, × scaling_factor."""
    from convtune.measure.kbcheck import SCALING_FACTOR, _Reference

    p = ConvProblem.from_mapping(dict(name="x", batch=2, in_channels=8, height=8, width=9, out_channels=4,
                                      kernel_h=3, kernel_w=3, epilogue=["bn_train", "scale"]))
    torch.manual_seed(0)
    ref = _Reference(p)
    with torch.no_grad():
        ref.bn.weight.uniform_(0.5, 1.5)
        ref.bn.bias.uniform_(-0.5, 0.5)
    x = torch.rand(p.input_shape)
    y = ref.conv(x)
    want = (y - y.mean(dim=(0, 2, 3), keepdim=True)) / torch.sqrt(y.var(dim=(0, 2, 3), unbiased=False, keepdim=True)
                                                                    + 1e-5)
    want = (want * ref.bn.weight.view(1, -1, 1, 1) + ref.bn.bias.view(1, -1, 1, 1)) * SCALING_FACTOR
    torch.testing.assert_close(ref(x), want, rtol=1e-5, atol=1e-5)
    assert SCALING_FACTOR == 2.0 and ref.training and int(ref.bn.num_batches_tracked) == 1
