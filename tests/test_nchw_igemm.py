"""nchw_igemm on the CPU: what it takes and refuses (one line naming the limit), its outputs through the Triton
interpreter (taps shifted along both axes, padding along H other than along W, dilation, weights through TMA where
C_in % 4 == 0 and pointer loads elsewhere, both output layouts, a channels_last input copied first), its TF32 rounding
ties broken to even in the kernel, its source compiled for sm_90 by the installed Triton (a register-A wgmma, no GPU
needed), and its place in the library, verify and the pins. GPU-only behaviour: tests/gpu_scripts/nchw_igemm.py and
`python -m convtune.commands.verify --variants nchw_igemm`."""


import pytest
import torch
import torch.nn.functional as F

import convtune
from convtune.library import dispatch, functional
from convtune.errors import ConfigError, UnsupportedProblem
from convtune.kernels import GENERAL, LIBRARY_KERNELS, Meta, get_variant
from convtune import pins
from convtune.kernels.variants import nchw_igemm as ni
from convtune.kernels.conv_args import geometry
from convtune.kernels.precision import round_to_tf32_even
from tests.conftest import compiled_for_sm90

META = Meta(64, 16, 16, 4, 2)
OTHER = "; nhwc_igemm and implicit_gemm run any convolution"


def _geometry(x=(2, 8, 6, 6), w=(4, 8, 3, 3), stride=1, padding=1, dilation=1):
    return geometry(torch.empty(x, device="meta"), torch.empty(w, device="meta"), stride, padding, dilation)


def _rule(x, w, b, padding, dilation=1):
    """cuDNN's TF32 rule at stride 1: operands rounded to nearest with ties to even, exact sums."""
    return F.conv2d(round_to_tf32_even(x).double(), round_to_tf32_even(w).double(), None if b is None else b.double(),
                    1, padding, dilation)


def test_vgg16_conv3_2_is_planned_one_image_a_grid_row_with_the_weight_through_tma():
    plan = ni.make_plan(_geometry(x=(32, 256, 56, 56), w=(256, 256, 3, 3)), True, ni.default_meta(256, 1, 56), "tf32")
    assert plan.grid == (3136 // 64, 32) and plan.out_shape == (32, 256, 56, 56) and not plan.out_cl
    assert plan.constexprs["W_TMA"] and (plan.constexprs["BLOCK_M"], plan.constexprs["BLOCK_N"]) == (64, 256)
    odd = ni.make_plan(_geometry(x=(3, 6, 5, 7), w=(40, 6, 5, 3), padding=(0, 1)), False, META, "tf32", out_cl=True)
    assert not odd.constexprs["W_TMA"] and odd.grid == (1 * 3, 3) and odd.out_shape == (3, 40, 1, 7) and odd.out_cl


@pytest.mark.parametrize("change, message", [
    ({"stride": 2}, (f"nchw_igemm takes stride 1 and an output as wide as the input (2*padding_w == "
                     f"dilation_w*(kernel_w-1)), got stride [2, 2], width 6 -> 3{OTHER}")),
    ({"padding": (1, 0)}, (f"nchw_igemm takes stride 1 and an output as wide as the input (2*padding_w == "
                           f"dilation_w*(kernel_w-1)), got stride [1, 1], width 6 -> 4{OTHER}")),
    ({"x": (65536, 1, 2, 2), "w": (1, 1, 1, 1), "padding": 0},
     f"nchw_igemm takes at most 65535 images a call (its grid's second axis), got 65536{OTHER}"),
    ({"x": (1, 2**16, 2**8, 2**7), "w": (1, 2**16, 1, 1), "padding": 0},
     (f"nchw_igemm indexes an image in int32: its input and output must each have < 2**31 elements, got 2147483648 "
      f"and 32768{OTHER}")),
])
def test_what_it_does_not_take_is_refused_naming_the_limit_and_the_kernels_that_run_it(change, message):
    with pytest.raises(UnsupportedProblem) as e:
        ni.make_plan(_geometry(**change), False, META, "tf32")
    assert str(e.value) == message


@pytest.mark.parametrize("precision", ["tf32_trunc", "tf32x3", "ieee"])
def test_precisions_other_than_tf32_are_refused(precision):
    with pytest.raises(UnsupportedProblem, match=f"nchw_igemm runs precision tf32 only .* got '{precision}'{OTHER}"):
        ni.make_plan(_geometry(), False, META, precision)


@pytest.mark.parametrize("meta, key, allowed", [
    (Meta(32, 16, 16, 4, 2), "BLOCK_M", "one of [64, 128, 256] for nchw_igemm (positions a tile: whole 64-row MMAs)"),
    (Meta(64, 16, 128, 4, 2), "BLOCK_K", "one of [16, 32, 64] for nchw_igemm (input channels a K step)"),
    (Meta(64, 16, 16, 2, 2), "num_warps", "one of [4, 8] for nchw_igemm (one or two warpgroups)"),
    (Meta(64, 16, 16, 4, 0), "num_stages", "an integer >= 1"),
])
def test_a_configuration_it_cannot_run_is_a_config_error_naming_the_key(meta, key, allowed):
    with pytest.raises(ConfigError) as e:
        ni.make_plan(_geometry(), False, meta, "tf32")
    assert e.value.key == key and e.value.allowed == allowed


@pytest.mark.parametrize("n, c, k, h, w, kernel, padding, dilation, bias, out_cl, layout", [
    (2, 20, 24, 5, 6, (3, 3), (1, 1), 1, True, False, "nchw"),        # weights through TMA, channels past C masked
    (1, 6, 17, 7, 5, (5, 3), (0, 1), 1, False, True, "nchw"),         # pointer weights (6 % 4), rows not padded
    (2, 8, 40, 6, 9, (3, 5), (2, 4), 2, True, True, "channels_last"),  # dilation 2; copied to NCHW in the call
    (1, 3, 5, 9, 9, (1, 7), (3, 3), 1, False, False, "nchw"),         # padding along H past the kernel: zero rows
])
def test_its_output_in_the_interpreter_is_cudnns_rule_at_stride_1(n, c, k, h, w, kernel, padding, dilation, bias, out_cl,
                                                                  layout):
    g = torch.Generator().manual_seed(n * 1000 + c * 10 + k)
    x = torch.randn(n, c, h, w, generator=g)
    if layout == "channels_last":
        x = x.contiguous(memory_format=torch.channels_last)
    wt = torch.randn(k, c, *kernel, generator=g) / (c * kernel[0] * kernel[1]) ** 0.5
    b = torch.randn(k, generator=g) if bias else None
    ref = _rule(x, wt, b, padding, dilation)
    assert ref.shape[3] == w  # the family: the output as wide as the input
    out = torch.full(ref.shape, float("nan"))
    out = out.contiguous(memory_format=torch.channels_last) if out_cl else out
    launched = ni.launch(x, wt, b, 1, padding, dilation, META, "tf32", out=out)
    assert launched.out is out and launched.llvm_opt == "none"
    torch.testing.assert_close(out.double(), ref, rtol=0, atol=2e-5)


def test_rounding_ties_go_to_even_in_the_kernel_as_cudnns_do_at_stride_1():
    """1 + 2**-11 is half a TF32 ulp above 1.0 (a tie): to even it is 1.0, away from zero 1 + 2**-10; 1 + 3·2**-11
    ties between 1 + 2**-10 and 1 + 2**-9 and goes to the even one, 1 + 2**-9. A 1×3 kernel of weights (0, 1, 0) reads
    each value once, at the middle tap."""
    x = torch.tensor([1 + 2**-11, 1 + 3 * 2**-11, -(1 + 2**-11), 2.0]).view(1, 1, 1, 4)
    out = ni.launch(x, torch.tensor([0.0, 1.0, 0.0]).view(1, 1, 1, 3), None, 1, (0, 1), 1, META, "tf32").out
    assert out.flatten().tolist() == [1.0, 1 + 2**-9, -1.0, 2.0]


# Run in a process of its own: under the tests' TRITON_INTERPRET=1 a @triton.jit kernel is the interpreter's and
# compiles nothing
_COMPILE_FOR_SM90 = """
import json
import torch, triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from convtune.kernels.variants import nchw_igemm as ni
from convtune.kernels.conv_args import geometry
found = []
for c, w_type in ((256, "tensordesc<fp32[256, 32]>"), (6, "*fp32")):
    g = geometry(torch.empty((32, c, 56, 56), device="meta"), torch.empty((256, c, 3, 3), device="meta"), 1, 1, 1)
    cx = {**ni.make_plan(g, True, ni.default_meta(256, 1, 56), "tf32").constexprs, "LLVM_OPT": "O3"}
    options = {"num_warps": cx.pop("num_warps"), "num_stages": cx.pop("num_stages")}
    sig = {"x_ptr": "*fp32", "w_ptr": w_type, "b_ptr": "*fp32", "y_ptr": "*fp32", "e_ptr": "*fp32", "r_ptr": "*fp32",
           **{n: "constexpr" for n in cx}}
    ttgir = triton.compile(ASTSource(ni._conv2d_nchw_kernel, sig, cx), target=GPUTarget("cuda", 90, 32),
                           options=options).asm["ttgir"]
    found.append({"w_tma": cx["W_TMA"], "tma": "async_tma_copy_global_to_local" in ttgir,
                  "dots": [line.strip() for line in ttgir.splitlines() if "ttng.warp_group_dot " in line]})
print(json.dumps(found))
"""


def test_the_source_compiles_for_sm90_to_a_register_a_wgmma_with_the_installed_triton():
    """The point of the kernel, checked where it is decided (the compiler, not the interpreter): the MMA (TTGIR
    warp_group_dot) takes the rounded input tile as a register operand (dot_op opIdx 0), the weight tiles come by TMA
    where C_in % 4 == 0 and not elsewhere. Compiled by the installed Triton and its ptxas for sm_90 in a subprocess
    without the interpreter; no GPU needed."""
    found = compiled_for_sm90(_COMPILE_FOR_SM90)
    assert [(f["w_tma"], f["tma"]) for f in found] == [(True, True), (False, False)]
    for f in found:
        assert f["dots"] and all("#ttg.dot_op<{opIdx = 0" in line for line in f["dots"]), f["dots"]


def test_it_is_a_library_kernel_restricted_to_its_family():
    v = get_variant("nchw_igemm")
    assert "nchw_igemm" in LIBRARY_KERNELS and "nchw_igemm" not in GENERAL
    assert v.restricted_to == ni.RESTRICTED_TO and v.tf32_ties == "even"
    assert v.precisions == ("tf32",) and v.compute_capability == (9, 0) and v.runs_on(None) and not v.runs_on((8, 0))
    assert v.prepared is ni.prepared and len(v.source_hash) == 12


def test_verify_draws_nchw_igemm_cases_from_its_family_at_tf32_and_they_pass_in_the_interpreter(capsys):
    from convtune.commands.verify import main as verify_main
    from convtune.commands.verify_cases import make_cases

    for small in (True, False):
        cases = make_cases(["nchw_igemm"], ["tf32", "ieee"], 200, 0, small=small)
        assert len(cases) == 200 and {c.precision for c in cases} == {"tf32"}
        for c in cases:  # every case is one the kernel takes (none would only test a refusal)
            g = _geometry(x=(c.n, c.c, c.h, c.w), w=(c.k, c.c, c.kh, c.kw), stride=c.stride, padding=c.padding,
                          dilation=c.dilation)
            ni.make_plan(g, c.bias, Meta(**c.meta) if c.meta else META, c.precision, c.layout == "channels_last")
        assert {c.layout for c in cases} == {"nchw", "channels_last"} and {c.kw for c in cases} == {1, 3, 5, 7}
        assert {c.c % 4 == 0 for c in cases} == {True, False} and {c.dilation for c in cases} > {(1, 1)}
    assert verify_main(["--device", "interpreter", "--variants", "nchw_igemm", "--shapes", "4"]) == 0
    out = capsys.readouterr().out  # tf32, and one case with a random chain of the ops it fuses
    assert "| nchw_igemm | tf32 fused | 1 | 1 |" in out and "0 failure(s) in 5 cases" in out


def test_a_pin_naming_nchw_igemm_runs_it_in_the_library_and_gives_cudnns_rule(tmp_path, monkeypatch):
    """A pin in implicit_gemm's section (the NCHW calls' section) may name nchw_igemm: convtune.conv2d then plans it."""
    f = tmp_path / "pins.yaml"
    monkeypatch.setenv(pins.ENV_VAR, str(f))
    key = "n2-c12-h4-w4-k6-r3x3-s1x1-p1x1-d1x1-g1-bias-nchw-float32/tf32"
    pins.write_pin(f, "interpreter", "implicit_gemm", key, pins.KernelPin("nchw_igemm", META), {})
    dispatch.forget()
    try:
        x, wt, b = torch.randn(2, 12, 4, 4), torch.randn(6, 12, 3, 3), torch.randn(6)
        out = convtune.conv2d(x, wt, b, padding=1, precision="tf32")
        assert [type(p) for p in functional.cached_plans()] == [ni.LaunchPlan]
        torch.testing.assert_close(out.double(), _rule(x, wt, b, 1), rtol=0, atol=5e-5)
    finally:
        dispatch.forget()
