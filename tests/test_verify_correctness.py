"""The correctness gate (convtune.measure.correctness) and the GPU correctness command (convtune.commands.verify), on the CPU."""

import json

import pytest
import torch

from convtune.measure.correctness import judge
from convtune.kernels import Meta, get_variant
from convtune.problem import ConvProblem
from convtune.commands.verify import run_case
from convtune.commands.verify_rules import follows_rounding_rule
from convtune.commands.verify_cases import Case
from convtune.commands.verify import main as verify_main
from tests.conftest import ROOT

P = ConvProblem("t", 2, 3, 12, 16, 20, 3, 4, (2, 4), (1, 2), (1, 1), 1, True)
REGRESSIONS = [json.loads(line) for line in (ROOT / "tests/data/gpu_wrong_cases.jsonl").read_text().splitlines()]


def inputs(seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.rand(P.input_shape, generator=g), torch.rand(P.weight_shape, generator=g) - 0.5, torch.rand(20, generator=g)


def run(precision):
    x, w, b = inputs()
    out = torch.full(P.output_shape, float("nan"))
    get_variant("implicit_gemm").launch(x, w, b, P.stride, P.padding, P.dilation, Meta(16, 32, 16, 4, 2), precision, out=out)
    return out, x, w, b


def test_tf32_matches_torch_and_records_both_references():
    out, x, w, b = run("tf32")
    v = judge(out, P, x, w, b, "tf32", 2e-3)
    assert v.ok and v.metrics["matches_torch"] == 1.0 and v.metrics["max_abs_err_vs_torch"] < 1e-5
    assert 1e-5 < v.metrics["rel_err"] < 2e-3  # TF32 is TF32: far from float64, as cuDNN's is
    assert v.tags["torch_reference"].startswith("emulated cuDNN TF32")
    assert v.tags["float64_reference"] == "float64 on the CPU"


def test_kernelbench_check_rejects_what_only_float64_accepts():
    out, x, w, b = run("tf32")
    out += 5e-4  # within TF32's float64 tolerance, outside KernelBench's allclose(1e-4)
    assert judge(out, P, x, w, b, "tf32", 2e-3, check="float64").ok
    v = judge(out, P, x, w, b, "tf32", 2e-3, check="kernelbench")
    assert not v.ok and "KernelBench's allclose" in v.message and v.metrics["matches_torch"] == 0.0


def test_unwritten_outputs_fail_whatever_the_check():
    out, x, w, b = run("ieee")
    out[0, 0, 0, 0] = float("nan")
    v = judge(out, P, x, w, b, "ieee", 1e-5, check="float64")
    assert not v.ok and v.unwritten == 1 and "not written" in v.message


def test_an_unknown_check_is_refused_by_name():
    out, x, w, b = run("ieee")
    with pytest.raises(ValueError, match="check='exact' is not allowed"):
        judge(out, P, x, w, b, "ieee", 1e-5, check="exact")


@pytest.mark.slow
def test_verify_runs_a_small_sample_through_the_interpreter_and_exits_zero(capsys):
    status = verify_main(["--device", "interpreter", "--shapes", "2", "--seed", "7"])  # the command's main, here
    out, err = capsys.readouterr()
    assert status == 0, out + err
    # every variant the interpreter runs, at each precision it declares (the registry's: fused_gluon is Hopper-only),
    # and in float16 where it takes it (bfloat16 needs a GPU: the interpreter computes it wrong)
    from convtune.kernels import VARIANTS
    from convtune.kernels.precision import PRECISIONS

    pairs = [(n, p) for n, v in sorted(VARIANTS.items()) if v.interpreted for p in PRECISIONS if v.runs_precision(p)]
    pairs += [(n, "float16") for n, v in sorted(VARIANTS.items()) if v.interpreted and v.takes_dtype("float16")]
    assert {n for n, p in pairs if p == "float16"} >= {"implicit_gemm", "fold_igemm", "nhwc_igemm", "nchw_1x1"}
    # and one case with a random epilogue (a quarter of --shapes, at least one) per variant that fuses one and dtype
    # (at tf32, or at tf32x3 where its chain has bn_train: verify_cases.BN_TRAIN_PRECISIONS)
    from convtune.commands.verify_cases import make_cases

    fused = [(n, "tf32" if d == "float32" else d) for n, v in sorted(VARIANTS.items()) if v.interpreted and v.epilogues
             for d in ("float32", "float16") if v.takes_dtype(d)]
    drawn = make_cases([n for n, _ in fused], ["tf32"], 2, 7, True, ("float32", "float16"), 1)
    with_bn_train = {(c.variant, "tf32") for c in drawn if "bn_train" in c.epilogue}
    assert all(c.precision == "tf32x3" for c in drawn if "bn_train" in c.epilogue) and with_bn_train
    fused = [(n, "tf32x3" if (n, p) in with_bn_train else p) for n, p in fused]
    assert {n for n, _ in fused} >= {"implicit_gemm"}
    total = 2 * len(pairs) + len(fused)
    assert f"verify: {total} cases (2 per variant × precision or dtype, seed 7) on interpreter" in out
    for n, v in VARIANTS.items():
        for p in PRECISIONS + ("float16", "bfloat16"):
            assert (f"| {n} | {p} | 2 |" in out) == ((n, p) in pairs), (n, p)
            assert (f"| {n} | {p} fused | 1 |" in out) == ((n, p) in fused), (n, p)
    assert out.strip().endswith(f"0 failure(s) in {total} cases")


def test_a_chain_with_bn_train_is_drawn_at_a_full_float32_precision_and_the_rest_at_tf32():
    """Two TF32 chains through a batch norm with the batch's statistics miss each other by allclose where neither is
    wrong (verify_cases.BN_TRAIN_PRECISIONS): verify draws bn_train at tf32x3 where the variant runs it, so that the
    case is judged against torch's full-float32 chain; a variant that runs neither tf32x3 nor ieee draws no bn_train."""
    from dataclasses import replace

    from convtune.commands.verify_cases import make_cases
    from convtune.kernels import VARIANTS

    cases = [c for c in make_cases(["nhwc_tma"], ["tf32"], 0, 3, True, ("float32", "float16"), 40) if c.epilogue]
    trained = [c for c in cases if "bn_train" in c.epilogue]
    assert len(trained) >= 10 and all(c.precision == "tf32x3" and c.dtype == "float32" for c in trained)
    assert all(c.precision == "tf32" for c in cases if "bn_train" not in c.epilogue)
    tf32_only = replace(VARIANTS["nhwc_tma"], name="nhwc_tma_tf32_only", precisions=("tf32",))
    VARIANTS[tf32_only.name] = tf32_only
    try:
        cases = [c for c in make_cases([tf32_only.name], ["tf32"], 0, 3, True, ("float32",), 40) if c.epilogue]
    finally:
        del VARIANTS[tf32_only.name]
    assert len(cases) == 40 and not any("bn_train" in c.epilogue for c in cases)


def test_verify_refuses_an_unknown_precision_in_one_line(capsys):
    status = verify_main(["--device", "interpreter", "--precisions", "fp8"])  # in-process: the command's own main
    assert status == 2 and capsys.readouterr().err.strip().splitlines() == [
        "error: --precisions fp8 is not allowed: one of ['tf32', 'tf32_trunc', 'tf32x3', 'ieee']"]


@pytest.mark.parametrize("ours_off, torch_off, follows", [
    (5e-6, 2e-4, True),    # the H200's tf32 mismatches: ours on the rounding rule, cuDNN away from it
    (5e-5, 2e-4, False),   # ours too far from the rule to say it follows it
    (5e-6, 5e-5, False),   # torch within the judge's tolerance of the rule: nothing for cuDNN to explain
])
def test_a_tf32_mismatch_is_blamed_on_cudnn_only_when_ours_follows_the_rounding_rule(ours_off, torch_off, follows):
    exact = torch.linspace(-3, 3, 101, dtype=torch.float64)
    r = follows_rounding_rule((exact + ours_off).float(), (exact - torch_off).float(), exact)
    assert r["follows_rule"] is follows
    assert r["ours_vs_rounded_exact"] == pytest.approx(ours_off, rel=0.1)
    assert r["torch_vs_rounded_exact"] == pytest.approx(torch_off, rel=0.1)


def test_verify_report_adds_up_out_files_and_counts_a_case_once(tmp_path, capsys):
    rows = [dict(REGRESSIONS[0], outcome="ok"), dict(REGRESSIONS[1], outcome="wrong", message="relative L2 error 1.1")]
    (tmp_path / "a.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "b.jsonl").write_text(json.dumps(rows[0]) + "\n" + '{"index": 3, "vari')  # a run killed mid-line
    status = verify_main(["--report", str(tmp_path / "a.jsonl"), str(tmp_path / "b.jsonl")])
    out, err = capsys.readouterr()
    assert status == 1, out + err
    assert "verify: report of 2 distinct cases from 2 file(s)" in out
    assert f"FAIL wrong: {rows[1]['case']}: relative L2 error 1.1" in out
    assert out.strip().endswith("1 failure(s) in 2 cases: see the FAIL lines above")
    assert "b.jsonl:2 is not a complete JSON line; skipped" in err


def test_expected_torch_mismatches_are_counted_in_the_summary_not_listed_case_by_case(tmp_path, capsys):
    """tf32_trunc truncates where torch rounds: its mismatches pass their float64 check and were once 51 note lines."""
    trunc = [dict(REGRESSIONS[i], index=i, precision="tf32_trunc", outcome="torch_mismatch", message=f"m{i}")
             for i in range(3)]
    tf32 = dict(REGRESSIONS[3], index=3, precision="tf32", outcome="torch_mismatch", message="m3")
    (tmp_path / "a.jsonl").write_text("".join(json.dumps(r) + "\n" for r in trunc + [tf32]))
    assert verify_main(["--report", str(tmp_path / "a.jsonl")]) == 1
    out = capsys.readouterr().out
    assert [line for line in out.splitlines() if line.startswith(("note", "FAIL"))] == [
        f"FAIL torch_mismatch: {tf32['case']}: m3"]  # tf32 promises torch's result: said case by case, a failure
    assert ("3 torch_mismatch case(s) passed their check against float64 in a precision that does not promise "
            "torch's result (tf32_trunc truncates operands where torch rounds them): expected, not failures") in out


def case_of(row):
    return Case.from_row(row)


SMALL = [r for r in REGRESSIONS if r["n"] * r["c"] * r["h"] * r["w"] * r["k"] < 3_000_000][:6]


@pytest.mark.parametrize("row", SMALL, ids=[r["case"][:60] for r in SMALL])
def test_the_shapes_the_gpu_got_wrong_are_right_in_the_interpreter(row):
    """Regression data: shapes an H200 computed wrongly (tests/data/gpu_wrong_cases.jsonl). The interpreter gets
    them right, so a wrong result there would be a new, CPU-visible bug."""
    result = run_case(case_of(row), "interpreter")
    assert result["outcome"] in ("ok", "torch_mismatch") and result["rel_err"] < 2e-3, result


@pytest.mark.gpu
def test_the_shapes_the_gpu_got_wrong_are_right_on_the_gpu():
    """Triton 3.6's O3 binaries for these shapes were wrong on an H200; the one-time check (kernels/llvm_opt.py)
    must catch each one and run it at O0."""
    results = [run_case(case_of(r), "cuda") for r in REGRESSIONS]
    assert all(r["outcome"] not in ("wrong", "error") for r in results), [r["case"] for r in results if r["outcome"] == "wrong"]


def test_verify_draws_channels_last_cases_for_the_variants_that_read_any_layout():
    """The layout is drawn last, so a seed's other fields are what they were; a channels_last case lays its input
    and its poisoned output out channels_last, and runs right in the interpreter."""
    import random

    from convtune.commands.verify_cases import draw_case, make_cases

    cases = make_cases(["seed", "implicit_gemm", "nhwc_igemm"], ["ieee"], 12, 3, small=True)
    layouts = {(c.variant, c.layout) for c in cases}
    assert ("implicit_gemm", "channels_last") in layouts and ("nhwc_igemm", "channels_last") in layouts
    assert {c.layout for c in cases if c.variant == "seed"} == {"nchw"}
    a, b = draw_case(random.Random(1), 0, "seed", "ieee", True), draw_case(random.Random(1), 0, "implicit_gemm", "ieee", True)
    assert (a.n, a.c, a.h, a.w, a.k, a.seed, a.meta) == (b.n, b.c, b.h, b.w, b.k, b.seed, b.meta)
    cl = next(c for c in cases if c.variant == "nhwc_igemm" and c.layout == "channels_last")
    assert "layout=channels_last" in cl.label() and Case.from_row({**cl.__dict__}).layout == "channels_last"
    from convtune.commands.verify_cases import case_tensors
    x = case_tensors(cl, "cpu")[1]
    assert x.is_contiguous(memory_format=torch.channels_last) and (cl.c == 1 or not x.is_contiguous())
    for case in [c for c in cases if c.layout == "channels_last"][:4]:
        result = run_case(case, "interpreter")
        assert result["outcome"] == "ok", result


def test_first_use_is_a_gpu_check_refused_in_one_line_without_one(capsys):
    from convtune.commands import verify

    assert verify.main(["--device", "interpreter", "--first-use", "2"]) == 2
    assert capsys.readouterr().err.strip() == ("error: --first-use checks the library's GPU path (it runs torch for "
                                               "CPU tensors): it needs a CUDA GPU")


def test_first_use_draws_library_calls_of_both_layouts_that_have_an_output():
    import random

    from convtune.commands.verify_cases import _out, draw_first_use

    rng = random.Random(0)
    cases = [draw_first_use(rng, i) for i in range(60)]
    assert {c.layout for c in cases} == {"nchw", "channels_last"} and {c.variant for c in cases} == {"library"}
    assert all(c.meta is None for c in cases)  # the library decides the configuration
    assert all(_out(c.h, c.kh, c.stride[0], c.padding[0], c.dilation[0]) >= 1 and
               _out(c.w, c.kw, c.stride[1], c.padding[1], c.dilation[1]) >= 1 for c in cases)
    assert sum(c.kh == c.kw and c.kh in (1, 3) and c.stride == (1, 1) and c.n >= 8 for c in cases) >= 15
