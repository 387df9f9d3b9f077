"""nhwc_tma on the CPU: what it takes and refuses (one line naming the limit), its outputs through the Triton
interpreter (padding and dilation read as TMA's zero fill, rows wider than a tile, channel blocks past C_in, both
input and output layouts, an input off 16-byte alignment, a fused chain), its source compiled for sm_90 by the
installed Triton (both operands by TMA, A read by the MMA from shared memory), and verify's cases. GPU-only
behaviour: `python -m convtune.commands.verify --variants nhwc_tma`."""


import pytest
import torch
import torch.nn.functional as F

from convtune.errors import ConfigError, UnsupportedProblem
from convtune.kernels import LIBRARY_KERNELS, Meta, get_variant
from convtune.kernels.conv_args import geometry
from convtune.kernels.epilogue import Epilogue, torch_chain
from convtune.kernels.precision import round_to_tf32_even
from convtune.kernels.variants import nhwc_tma as tma
from tests.conftest import compiled_for_sm90

META = Meta(64, 64, 16, 4, 2)


def _geometry(x=(2, 16, 6, 6), w=(4, 16, 3, 3), stride=1, padding=1, dilation=1):
    return geometry(torch.empty(x, device="meta"), torch.empty(w, device="meta"), stride, padding, dilation)


@pytest.mark.parametrize("change, bytes_, message", [
    ({"stride": 2}, 4, "nhwc_tma takes stride 1 only (a tap's A tile is then one box of the input), got stride [2, 2]; "
                       "nhwc_igemm runs it"),
    ({"x": (2, 6, 6, 6), "w": (4, 6, 3, 3)}, 4, "nhwc_tma takes input channels whose rows are 16-byte aligned (TMA), a "
                                                 "multiple of 4; got 6; nhwc_igemm runs it"),
    ({"x": (2, 12, 6, 6), "w": (4, 12, 3, 3)}, 2, "nhwc_tma takes input channels whose rows are 16-byte aligned (TMA), "
                                                   "a multiple of 8; got 12; nhwc_igemm runs it"),
])
def test_what_it_does_not_take_is_refused_naming_the_limit_and_the_kernel_that_runs_it(change, bytes_, message):
    with pytest.raises(UnsupportedProblem) as e:
        tma.make_plan(_geometry(**change), False, META, "tf32", element_bytes=bytes_)
    assert str(e.value) == message


def test_float32_runs_at_tf32_or_tf32x3_only_and_its_space_is_its_boxes():
    with pytest.raises(UnsupportedProblem, match="nhwc_tma runs float32 at precision tf32 or tf32x3 only"):
        tma.make_plan(_geometry(), False, META, "ieee")
    split = tma.make_plan(_geometry(), False, META, "tf32x3")  # nothing rounded: the dot splits the operands
    assert split.constexprs["PRECISION"] == "tf32x3" and not split.rounds
    with pytest.raises(ConfigError, match="BLOCK_M"):
        tma.make_plan(_geometry(), False, Meta(32, 64, 16, 4, 2), "tf32")
    plan = tma.make_plan(_geometry(x=(3, 16, 10, 130), w=(200, 16, 3, 3)), True, Meta(128, 128, 32, 4, 3), "tf32")
    assert plan.grid == (3 * 10 * 2 * 2,) and plan.out_shape == (3, 200, 10, 130) and plan.rounds


def _rule(x, w, b, padding, dilation):
    """cuDNN's TF32 rule at stride 1: operands rounded to nearest with ties to even, exact sums."""
    return F.conv2d(round_to_tf32_even(x).double(), round_to_tf32_even(w).double(), None if b is None else b.double(),
                    1, padding, dilation)


@pytest.mark.parametrize("n, c, k, h, w, kernel, padding, dilation, layout, out_cl", [
    (2, 16, 20, 9, 70, (3, 3), (1, 1), (1, 1), "nchw", False),          # two tiles a row, the second part-empty
    (1, 24, 9, 5, 7, (3, 5), (1, 2), (2, 1), "channels_last", True),    # 24 channels: a block of 16 past C_in
    (2, 8, 5, 6, 40, (3, 3), (1, 0), (1, 1), "offset", False),          # 8 channels: the row-window view, K 24
    (1, 4, 6, 7, 70, (2, 5), (0, 0), (2, 1), "nchw", True),             # 4 channels, K 20: two windows of 16
    (2, 8, 5, 4, 6, (1, 1), (0, 0), (1, 1), "offset", False),           # a channels_last view 16 bytes off + 4
    (1, 16, 3, 3, 3, (3, 3), (2, 2), (1, 1), "nchw", True),             # padding wider than the image's edge
])
def test_its_output_in_the_interpreter_is_cudnns_rule_at_stride_1(n, c, k, h, w, kernel, padding, dilation, layout,
                                                                     out_cl):
    g = torch.Generator().manual_seed(n * 1000 + c * 10 + k)
    x = torch.randn(n, c, h, w, generator=g)
    if layout == "channels_last":
        x = x.contiguous(memory_format=torch.channels_last)
    elif layout == "offset":
        base = torch.zeros(n * c * h * w + 1)
        x = base[1:].view(n, h, w, c).permute(0, 3, 1, 2)
        x.copy_(torch.randn(n, c, h, w, generator=g))
        assert x.data_ptr() % 16 and x.is_contiguous(memory_format=torch.channels_last)
    wt = torch.randn(k, c, *kernel, generator=g) / c ** 0.5
    b = torch.randn(k, generator=g)
    oh, ow = (h + 2 * padding[0] - dilation[0] * (kernel[0] - 1), w + 2 * padding[1] - dilation[1] * (kernel[1] - 1))
    out = torch.full((n, k, oh, ow), float("nan"))
    out = out.contiguous(memory_format=torch.channels_last) if out_cl else out
    launched = tma.launch(x, wt, b, 1, padding, dilation, META, "tf32", out=out)
    assert launched.out is out and launched.llvm_opt == "none"
    plan = tma.make_plan(_geometry((n, c, h, w), (k, c, *kernel), 1, padding, dilation), True, META, "tf32")
    assert plan.constexprs["WINDOW"] == (c < 16 and kernel[1] > 1 and padding[1] == 0 and dilation[1] == 1)
    torch.testing.assert_close(out.double(), _rule(x, wt, b, padding, dilation), rtol=0, atol=2e-5)
    if layout == "nchw":  # at tf32x3 nothing is rounded: the float32 sum (TF32-rounded operands miss it by 1e-3)
        exact = F.conv2d(x.double(), wt.double(), b.double(), 1, padding, dilation)
        y = tma.launch(x, wt, b, 1, padding, dilation, META, "tf32x3").out
        torch.testing.assert_close(y.double(), exact, rtol=0, atol=2e-5)


def test_a_fused_chain_is_applied_to_the_sums_as_torch_applies_it():
    g = torch.Generator().manual_seed(7)
    x, wt = torch.randn(2, 16, 6, 9, generator=g), torch.randn(12, 16, 3, 3, generator=g) / 4
    vectors, residual = torch.randn(2 * 3, 12, generator=g), torch.randn(2, 12, 6, 9, generator=g)
    ep = Epilogue(("bn", "add", "relu"), vectors, residual)
    y = tma.launch(x, wt, None, 1, 1, 1, META, "tf32", epilogue=ep).out
    want = torch_chain(_rule(x, wt, None, 1, 1), Epilogue(("bn", "add", "relu"), vectors.double(), residual.double()))
    torch.testing.assert_close(y.double(), want, rtol=0, atol=3e-5)


@pytest.mark.parametrize("dtype, out_cl, precision", [(torch.float32, False, "tf32"), (torch.float32, True, "tf32x3"),
                                                      (torch.float16, True, "tf32")])
def test_a_batch_norm_in_training_mode_normalizes_by_the_batchs_statistics_in_two_passes(dtype, out_cl, precision):
    """bn_train: the statistics pass's sums, then the convolution again with the batch's rows, against torch's
    BatchNorm2d in training mode after the convolution (a chain after it too). In float32 within 2e-5 of cuDNN's rule
    (tf32) or of the exact sum (tf32x3), so sums off by one tile's rows (or the rows' variance unbiased, or no eps)
    fail it, and so does a tf32x3 statistics pass without the weight's remainder: the input's mean is 0.5 here, as in
    KernelBench level 2 #73, and a TF32-rounded weight moves the batch's mean."""
    g = torch.Generator().manual_seed(11)
    x, wt, b = torch.rand(3, 8, 5, 70, generator=g), torch.randn(10, 8, 3, 3, generator=g) / 8, torch.randn(10, generator=g)
    gamma, beta, factor = torch.rand(10, generator=g) + 0.5, torch.randn(10, generator=g), torch.rand(10, generator=g) + 1
    vectors = torch.stack((gamma, beta, factor, torch.zeros(10), torch.zeros(10), torch.zeros(10)))
    ep = Epilogue(("bn_train", "scale", "relu"), vectors)
    out = torch.full((3, 10, 3, 68), float("nan"), dtype=dtype)
    out = out.contiguous(memory_format=torch.channels_last) if out_cl else out
    y = tma.launch(x.to(dtype), wt.to(dtype), b.to(dtype), 1, 0, 1, META, precision, out=out,
                   epilogue=Epilogue(ep.chain, vectors.to(dtype))).out
    bn = torch.nn.BatchNorm2d(10).double().train()
    bn.weight.data, bn.bias.data = gamma.to(dtype).double(), beta.to(dtype).double()
    conv = _rule(x, wt, b, 0, 1) if precision == "tf32" and dtype == torch.float32 else \
        F.conv2d(*(t.to(dtype).double() for t in (x, wt, b)))
    want = torch.relu(bn(conv.to(dtype).double()) * factor.to(dtype).double().view(1, -1, 1, 1)).detach()
    assert torch.equal(torch_chain(conv.to(dtype).double(), Epilogue(ep.chain, vectors.to(dtype).double())), want)
    torch.testing.assert_close(y.double(), want, rtol=0, atol=2e-5 if dtype == torch.float32 else 2e-2)


# Run in a process of its own: under the tests' TRITON_INTERPRET=1 a @triton.jit kernel is the interpreter's and
# compiles nothing
_COMPILE_FOR_SM90 = """
import json
import torch, triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from convtune.kernels.variants import nhwc_tma as tma
from convtune.kernels.conv_args import geometry
found = []
for dtype, bk, precision in (("fp32", 32, "tf32"), ("bf16", 64, "tf32"), ("fp32", 32, "tf32x3")):
    g = geometry(torch.empty((128, 64, 128, 128), device="meta"), torch.empty((128, 64, 3, 3), device="meta"), 1, 0, 1)
    plan = tma.make_plan(g, True, tma.Meta(128, 128, bk, 4, 3), precision, element_bytes=4 if dtype == "fp32" else 2)
    cx = {**plan.constexprs, "LLVM_OPT": "O3"}
    options = {"num_warps": cx.pop("num_warps"), "num_stages": cx.pop("num_stages")}
    sig = {"x_desc": f"tensordesc<{dtype}[1, 1, 128, {bk}]>", "w_desc": f"tensordesc<{dtype}[128, {bk}]>",
           "b_ptr": f"*{dtype}", "y_ptr": f"*{dtype}", "e_ptr": f"*{dtype}", "r_ptr": f"*{dtype}", "N": "i32",
           **{n: "constexpr" for n in cx}}
    ttgir = triton.compile(ASTSource(tma._conv2d_nhwc_tma_kernel, sig, cx), target=GPUTarget("cuda", 90, 32),
                           options=options).asm["ttgir"]
    found.append({"tma": ttgir.count("async_tma_copy_global_to_local"), "local_load": ttgir.count("ttg.local_load"),
                  "dots": [line.strip() for line in ttgir.splitlines() if "ttng.warp_group_dot " in line]})
print(json.dumps(found))
"""


def test_the_source_compiles_for_sm90_to_tma_copies_of_both_operands_and_an_mma_reading_a_from_shared_memory():
    """The point of the kernel, checked where it is decided (the compiler, not the interpreter): both operands come
    by TMA, and the MMA (TTGIR warp_group_dot) takes A as a shared-memory descriptor, never through registers
    (rounding it in the kernel, or a tile of two output rows reshaped, would load it into registers). At tf32x3 A is
    split in registers, and the three MMAs a step take the weight's halves from shared memory as TMA put them there
    (Triton's own tf32x3 splits the weight in registers and stores it back). Compiled by the installed Triton for
    sm_90 in a subprocess without the interpreter; no GPU needed."""
    *tf32, split = compiled_for_sm90(_COMPILE_FOR_SM90)
    for f in tf32:
        assert f["tma"] >= 2 and f["local_load"] == 0, f
        assert f["dots"] and all(line.split("} : ")[1].startswith("!ttg.memdesc") for line in f["dots"]), f["dots"]
    assert split["tma"] >= 3 and len(split["dots"]) == 3, split
    for line in split["dots"]:
        a, b = line.split("} : ")[1].split(" * ")
        assert a.startswith("tensor<") and b.startswith("!ttg.memdesc"), line


def test_it_is_a_library_kernel_restricted_to_its_family_that_only_a_pin_or_a_contest_runs():
    v = get_variant("nhwc_tma")
    assert "nhwc_tma" in LIBRARY_KERNELS and v.serves is None and v.export is not None
    assert v.restricted_to == tma.RESTRICTED_TO and v.tf32_ties == "even" and v.precisions == ("tf32", "tf32x3")
    assert v.dtypes == ("float32", "bfloat16", "float16") and v.compute_capability == (9, 0) and not v.runs_on((8, 9))


def test_verify_draws_cases_from_its_family_and_they_pass_in_the_interpreter(capsys):
    from convtune.commands.verify import main as verify_main
    from convtune.commands.verify_cases import make_cases

    for small in (True, False):
        cases = make_cases(["nhwc_tma"], ["tf32", "tf32x3", "ieee"], 200, 0, small=small)
        assert len(cases) == 400 and {c.precision for c in cases} == {"tf32", "tf32x3"}
        for c in cases:  # every case is one the kernel takes, in either dtype (none would only test a refusal)
            g = _geometry(x=(c.n, c.c, c.h, c.w), w=(c.k, c.c, c.kh, c.kw), stride=c.stride, padding=c.padding,
                          dilation=c.dilation)
            tma.make_plan(g, c.bias, Meta(**c.meta) if c.meta else META, c.precision, c.layout == "channels_last", 2)
        assert {c.layout for c in cases} == {"nchw", "channels_last"} and {c.offset for c in cases} > {0}
    assert verify_main(["--device", "interpreter", "--variants", "nhwc_tma", "--shapes", "2"]) == 0
    out = capsys.readouterr().out  # tf32, tf32x3 and float16 (the interpreter's 16-bit dtype); fused cases in two
    assert "| nhwc_tma | tf32 | 2 |" in out and "| nhwc_tma | tf32x3 | 2 |" in out and "| nhwc_tma | float16 | 2 |" in out
    assert "0 failure(s) in 8 cases" in out


def test_the_statistics_at_tf32x3_over_a_large_batch_are_two_tf32_products_of_the_rounded_input(monkeypatch):
    """From TWO_PRODUCTS_MIN_COUNT output positions up (1 here), bn_train's statistics pass at tf32x3 runs two TF32
    products: its sums are float64's for the input rounded to nearest TF32 (ties to even) and the float32 weight (its
    TF32 rounding plus the remainder). Inputs in [0, 1), as KernelBench level 2 #73's: the sums with the weight rounded
    too, or with the input not rounded, are each further from those than the test allows."""
    monkeypatch.setattr(tma, "TWO_PRODUCTS_MIN_COUNT", 1)
    g = torch.Generator().manual_seed(5)
    x, wt = torch.rand(3, 8, 5, 70, generator=g), torch.randn(10, 8, 3, 3, generator=g) / 8
    b = torch.randn(10, generator=g)
    plan = tma.make_plan(_geometry(x.shape, wt.shape, padding=0), True, META, "tf32x3")
    xk = tma.kernel_input(x, plan)
    out = torch.empty((3, 10, 3, 68)).contiguous(memory_format=torch.channels_last)
    sums = tma.statistics(plan, xk, tma.descriptors(xk, tma.weight_operand(wt, plan), plan.constexprs)[0], wt, b, out)

    def moments(s):  # the batch's mean and variance of each channel
        mean = s[0] / 612
        return mean, s[1] / 612 - mean * mean

    def sums_of(x_, w_):
        y = F.conv2d(x_.double(), w_.double(), b.double())
        return torch.stack((y.sum(dim=(0, 2, 3)), (y * y).sum(dim=(0, 2, 3))))

    mean, var = moments(sums_of(round_to_tf32_even(x), wt))

    def error(s):  # in standard deviations for the mean, relative for the variance
        m, v = moments(s)
        return max(float(((m - mean).abs() / var.sqrt()).max()), float(((v - var).abs() / var).max()))

    # float32 tile sums: 1.6e-6 here; the weight rounded too: 9.3e-4; the input not rounded: 5.2e-5
    assert error(sums_of(round_to_tf32_even(x), round_to_tf32_even(wt))) > 3e-5 and error(sums_of(x, wt)) > 3e-5
    assert error(sums.double()) < 1e-5
