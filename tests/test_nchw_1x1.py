"""nchw_1x1 on the CPU: what it takes and refuses (one line naming the limit), its outputs through the Triton
interpreter (both input paths: TMA tiles where H·W is a multiple of 4, masked loads elsewhere; both output layouts;
inputs it must copy first), its TF32 rounding ties broken to even in the kernel, its source compiled for sm_90 by the
installed Triton (TMA copies and a register-A wgmma, no GPU needed), and its place in the library, verify and the
pins. GPU-only behaviour: tests/gpu_scripts/nchw_1x1.py and `python -m convtune.commands.verify --variants nchw_1x1`."""


import pytest
import torch
import torch.nn.functional as F

import convtune
from convtune.library import dispatch, functional
from convtune.errors import ConfigError, UnsupportedProblem
from convtune.kernels import GENERAL, LIBRARY_KERNELS, Meta, get_variant
from convtune import pins
from convtune.kernels.variants import nchw_1x1 as pw
from convtune.kernels.conv_args import geometry
from convtune.kernels.precision import round_to_tf32_even
from tests.conftest import compiled_for_sm90

META = Meta(64, 16, 16, 4, 2)


def _geometry(x=(2, 8, 6, 6), w=(4, 8, 1, 1), stride=1, padding=0, dilation=1):
    return geometry(torch.empty(x, device="meta"), torch.empty(w, device="meta"), stride, padding, dilation)


def _rule(x, w, b):
    """cuDNN's TF32 rule at stride 1: operands rounded to nearest with ties to even, exact sums."""
    return F.conv2d(round_to_tf32_even(x).double(), round_to_tf32_even(w).double(), None if b is None else b.double())


def test_resnet50_layer1_1x1_is_planned_with_tma_tiles_one_image_a_grid_row():
    plan = pw.make_plan(_geometry(x=(64, 256, 56, 56), w=(64, 256, 1, 1)), False, pw.default_meta(64, 1, 56), "tf32")
    assert plan.grid == (3136 // 64, 64) and plan.out_shape == (64, 64, 56, 56) and not plan.out_cl
    assert plan.constexprs["X_TMA"] and plan.constexprs["HW"] == 3136 and plan.constexprs["C"] == 256
    odd = pw.make_plan(_geometry(x=(2, 512, 7, 7), w=(2048, 512, 1, 1)), True, META, "tf32", out_cl=True)
    assert not odd.constexprs["X_TMA"] and odd.grid == (1 * 2048 // 16, 2) and odd.out_cl  # 49 positions: masked loads


@pytest.mark.parametrize("change, message", [
    ({"w": (4, 8, 3, 3), "padding": 1}, ("nchw_1x1 takes a 1x1 kernel, stride 1 and padding 0, got 3x3, stride "
                                         "[1, 1], padding [1, 1]; implicit_gemm runs any convolution")),
    ({"stride": 2}, ("nchw_1x1 takes a 1x1 kernel, stride 1 and padding 0, got 1x1, stride [2, 2], padding [0, 0]; "
                     "implicit_gemm runs any convolution")),
    ({"padding": (0, 1)}, ("nchw_1x1 takes a 1x1 kernel, stride 1 and padding 0, got 1x1, stride [1, 1], padding "
                           "[0, 1]; implicit_gemm runs any convolution")),
    ({"x": (65536, 1, 2, 2), "w": (1, 1, 1, 1)}, ("nchw_1x1 takes at most 65535 images a call (its grid's second "
                                                  "axis), got 65536; implicit_gemm runs any convolution")),
])
def test_what_it_does_not_take_is_refused_naming_the_limit_and_the_kernel_that_runs_it(change, message):
    with pytest.raises(UnsupportedProblem) as e:
        pw.make_plan(_geometry(**change), False, META, "tf32")
    assert str(e.value) == message


@pytest.mark.parametrize("precision", ["tf32_trunc", "tf32x3", "ieee"])
def test_precisions_other_than_tf32_are_refused(precision):
    with pytest.raises(UnsupportedProblem, match=f"nchw_1x1 runs precision tf32 only .* got '{precision}'; "
                       "implicit_gemm runs any convolution"):
        pw.make_plan(_geometry(), False, META, precision)


@pytest.mark.parametrize("meta, key, allowed", [
    (Meta(32, 16, 16, 4, 2), "BLOCK_M", "one of [64, 128, 256] for nchw_1x1 (positions a tile: whole 64-row MMAs)"),
    (Meta(64, 128, 16, 4, 2), "BLOCK_N", ("one of [16, 32, 64] for nchw_1x1 (output channels a tile: 128 gave wrong "
                                          "outputs on the H200)")),
    (Meta(64, 16, 8, 4, 2), "BLOCK_K", "one of [16, 32, 64] for nchw_1x1 (input channels a K step)"),
    (Meta(64, 16, 16, 2, 2), "num_warps", "one of [4, 8] for nchw_1x1 (one or two warpgroups)"),
    (Meta(64, 16, 16, 4, 0), "num_stages", "an integer >= 1"),
])
def test_a_configuration_it_cannot_run_is_a_config_error_naming_the_key(meta, key, allowed):
    with pytest.raises(ConfigError) as e:
        pw.make_plan(_geometry(), False, meta, "tf32")
    assert e.value.key == key and e.value.allowed == allowed


@pytest.mark.parametrize("n, c, k, h, w, bias, out_cl, layout", [
    (2, 20, 24, 4, 6, True, False, "nchw"),           # H·W 24: TMA tiles, channels past C and positions past H·W zero
    (1, 33, 17, 3, 5, False, True, "nchw"),           # H·W 15: masked loads, a channels_last output
    (2, 8, 70, 6, 6, True, True, "channels_last"),    # copied to NCHW inside the call; 5 channel tiles of 16
    (1, 16, 5, 8, 8, False, False, "offset"),         # a view 4 bytes off: copied so that TMA may read it
])
def test_its_output_in_the_interpreter_is_cudnns_rule_at_stride_1(n, c, k, h, w, bias, out_cl, layout):
    g = torch.Generator().manual_seed(n * 1000 + c * 10 + k)
    x = torch.randn(n, c, h, w, generator=g)
    if layout == "channels_last":
        x = x.contiguous(memory_format=torch.channels_last)
    elif layout == "offset":
        x = torch.cat([torch.zeros(1), x.flatten()])[1:].view(n, c, h, w)
        assert x.data_ptr() % 16 and pw.readable_input(x, pw.make_plan(_geometry(x=x.shape, w=(k, c, 1, 1)), False,
                                                                           META, "tf32")).data_ptr() % 16 == 0
    wt = torch.randn(k, c, 1, 1, generator=g) / c ** 0.5
    b = torch.randn(k, generator=g) if bias else None
    out = torch.full((n, k, h, w), float("nan"))
    out = out.contiguous(memory_format=torch.channels_last) if out_cl else out
    launched = pw.launch(x, wt, b, 1, 0, 1, META, "tf32", out=out)
    assert launched.out is out and launched.llvm_opt == "none"
    torch.testing.assert_close(out.double(), _rule(x, wt, b), rtol=0, atol=2e-5)


def test_rounding_ties_go_to_even_in_the_kernel_as_cudnns_do_at_stride_1():
    """1 + 2**-11 is half a TF32 ulp above 1.0 (a tie): to even it is 1.0, away from zero 1 + 2**-10; 1 + 3·2**-11
    ties between 1 + 2**-10 and 1 + 2**-9 and goes to the even one, 1 + 2**-9. The weight is exactly 1."""
    x = torch.tensor([1 + 2**-11, 1 + 3 * 2**-11, -(1 + 2**-11), 2.0]).view(1, 1, 2, 2)
    out = pw.launch(x, torch.ones(1, 1, 1, 1), None, 1, 0, 1, META, "tf32").out
    assert out.flatten().tolist() == [1.0, 1 + 2**-9, -1.0, 2.0]


def test_the_weight_is_packed_once_rounded_ties_to_even_and_again_after_an_update():
    wt = torch.tensor([1 + 2**-11, 1 + 3 * 2**-11]).view(2, 1, 1, 1)
    first = pw.packed_weight(wt)
    assert first.shape == (2, 1) and first.flatten().tolist() == [1.0, 1 + 2**-9]
    assert pw.packed_weight(wt) is first
    wt.mul_(2)
    assert pw.packed_weight(wt).flatten().tolist() == [2.0, 2 + 2**-8]


# Run in a process of its own: under the tests' TRITON_INTERPRET=1 a @triton.jit kernel is the interpreter's and
# compiles nothing
_COMPILE_FOR_SM90 = """
import json, sys
import torch, triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from convtune.kernels.variants import nchw_1x1 as pw
from convtune.kernels.conv_args import geometry
found = []
for x_shape, x_type in (((64, 256, 56, 56), "tensordesc<fp32[1, 32, 64]>"), ((2, 64, 7, 7), "*fp32")):
    g = geometry(torch.empty(x_shape, device="meta"), torch.empty((64, x_shape[1], 1, 1), device="meta"), 1, 0, 1)
    cx = {**pw.make_plan(g, False, pw.default_meta(64, 1, 56), "tf32").constexprs, "LLVM_OPT": "O3"}
    options = {"num_warps": cx.pop("num_warps"), "num_stages": cx.pop("num_stages")}
    sig = {"x_ptr": x_type, "w_ptr": "*fp32", "b_ptr": "*fp32", "y_ptr": "*fp32", "e_ptr": "*fp32", "r_ptr": "*fp32",
           **{n: "constexpr" for n in cx}}
    ttgir = triton.compile(ASTSource(pw._conv2d_1x1_kernel, sig, cx), target=GPUTarget("cuda", 90, 32),
                           options=options).asm["ttgir"]
    found.append({"x_tma": cx["X_TMA"], "tma": "async_tma_copy_global_to_local" in ttgir,
                  "dots": [line.strip() for line in ttgir.splitlines() if "ttng.warp_group_dot " in line]})
print(json.dumps(found))
"""


def test_the_source_compiles_for_sm90_to_tma_copies_and_a_register_a_wgmma_with_the_installed_triton():
    """The point of the kernel, checked where it is decided (the compiler, not the interpreter): the input tiles come
    by TMA into shared memory, and the MMA (TTGIR warp_group_dot) takes the rounded tile as a register operand
    (dot_op opIdx 0); where H·W is not a multiple of 4, no TMA. Compiled by the installed Triton and its ptxas for
    sm_90 in a subprocess without the interpreter; no GPU needed."""
    found = compiled_for_sm90(_COMPILE_FOR_SM90)
    assert [(f["x_tma"], f["tma"]) for f in found] == [(True, True), (False, False)]
    for f in found:
        assert f["dots"] and all("#ttg.dot_op<{opIdx = 0" in line for line in f["dots"]), f["dots"]


def test_it_is_a_library_kernel_restricted_to_its_family():
    v = get_variant("nchw_1x1")
    assert "nchw_1x1" in LIBRARY_KERNELS and "nchw_1x1" not in GENERAL
    assert v.restricted_to == pw.RESTRICTED_TO and v.tf32_ties == "even"
    assert v.precisions == ("tf32",) and v.compute_capability == (9, 0) and v.runs_on(None) and not v.runs_on((8, 0))
    assert v.prepared is pw.prepared and len(v.source_hash) == 12


def test_verify_draws_nchw_1x1_cases_from_its_family_at_tf32_and_they_pass_in_the_interpreter(capsys):
    from convtune.commands.verify import main as verify_main
    from convtune.commands.verify_cases import make_cases

    for small in (True, False):
        cases = make_cases(["nchw_1x1"], ["tf32", "ieee"], 200, 0, small=small)
        assert len(cases) == 200 and {c.precision for c in cases} == {"tf32"}
        for c in cases:  # every case is one the kernel takes (none would only test a refusal)
            g = _geometry(x=(c.n, c.c, c.h, c.w), w=(c.k, c.c, c.kh, c.kw), stride=c.stride, padding=c.padding,
                          dilation=c.dilation)
            pw.make_plan(g, c.bias, Meta(**c.meta) if c.meta else META, c.precision, c.layout == "channels_last")
        assert {c.layout for c in cases} == {"nchw", "channels_last"}
        assert {(c.h * c.w) % 4 == 0 for c in cases} == {True, False} and {c.offset for c in cases} > {0}
    assert verify_main(["--device", "interpreter", "--variants", "nchw_1x1", "--shapes", "6"]) == 0
    out = capsys.readouterr().out  # tf32, and float16 (the interpreter's 16-bit dtype); one fused case in each
    assert "| nchw_1x1 | tf32 | 6 |" in out and "| nchw_1x1 | float16 | 6 |" in out and "0 failure(s) in 14 cases" in out
    assert "| nchw_1x1 | tf32 fused | 1 |" in out and "| nchw_1x1 | float16 fused | 1 |" in out


def test_a_pin_naming_nchw_1x1_runs_it_in_the_library_and_gives_cudnns_rule(tmp_path, monkeypatch):
    """A pin in implicit_gemm's section (the NCHW calls' section) may name nchw_1x1: convtune.conv2d then plans it,
    for an NCHW call and, on a channels_last copy, for a channels_last one under its own key."""
    f = tmp_path / "pins.yaml"
    monkeypatch.setenv(pins.ENV_VAR, str(f))
    key = "n2-c12-h4-w4-k6-r1x1-s1x1-p0x0-d1x1-g1-bias-nchw-float32/tf32"
    pins.write_pin(f, "interpreter", "implicit_gemm", key, pins.KernelPin("nchw_1x1", META), {})
    dispatch.forget()
    try:
        x, wt, b = torch.randn(2, 12, 4, 4), torch.randn(6, 12, 1, 1), torch.randn(6)
        out = convtune.conv2d(x, wt, b, precision="tf32")
        assert [type(p) for p in functional.cached_plans()] == [pw.LaunchPlan]
        torch.testing.assert_close(out.double(), _rule(x, wt, b), rtol=0, atol=2e-5)
    finally:
        dispatch.forget()
