"""fold_igemm (Triton interpreter): the fold is the space-to-depth it claims to be, the folded GEMM is the strided
convolution (L1 #50's geometry too, with cuDNN's TF32 rounding), the 96-channel column split, what it refuses, and
the library running it where a pin names it. GPU-only behaviour (TMA, the bound launches, many random shapes) is
checked by `python -m convtune.commands.verify --variants fold_igemm` and tests/gpu_scripts/fold_igemm.py."""

import pytest
import torch
import torch.nn.functional as F

import convtune
from convtune.library import dispatch, functional
from convtune.errors import UnsupportedProblem
from convtune.kernels import Meta, get_variant
from convtune import pins
from convtune.kernels.variants import fold_igemm as fi
from convtune.kernels.conv_args import geometry
from convtune.kernels.precision import round_to_tf32

fold_igemm = get_variant("fold_igemm")


def tf32_ref(x, w, b, stride, padding):
    """cuDNN's TF32 convolution: operands rounded to nearest TF32, exact sums."""
    return F.conv2d(round_to_tf32(x).double(), round_to_tf32(w).double(), None if b is None else b.double(), stride,
                    padding)


def space_to_depth(x, stride, padding, hf, wf, cf):
    """The fold by torch: pad, cut to HF·SH × WF·SW, channel (c, r, s), zero channels up to cf; NHWC."""
    sh, sw = stride
    n, c = x.shape[:2]
    xp = F.pad(x, (padding[1], wf * sw, padding[0], hf * sh))[:, :, :hf * sh, :wf * sw]
    y = xp.reshape(n, c, hf, sh, wf, sw).permute(0, 2, 4, 1, 3, 5).reshape(n, hf, wf, c * sh * sw)
    return F.pad(y, (0, cf - c * sh * sw))


@pytest.mark.parametrize("precision", ["tf32", "ieee"])
@pytest.mark.parametrize("shape,stride,padding,tiled", [
    ((2, 3, 23, 19), (4, 4), (2, 2), True),  # L1 #50's kind: CF 48 = 4 (3 channels and a zero one) · 16
    ((1, 5, 9, 12), (2, 3), (1, 0), False),  # a stride of 3: the elementwise fold
    ((1, 4, 7, 7), (1, 1), (3, 1), True),
    ((1, 1, 6, 9), (1, 2), (0, 1), True),  # CF 4 from 2 channels (c, s): the zero channels past them come from CP
    ((1, 33, 5, 150), (2, 2), (1, 1), True),  # CP 64 · 4 = 256 channels a position: WF 76 in blocks of 16 (WB)
])
def test_the_fold_is_space_to_depth_with_the_padding_and_tf32_rounding(shape, stride, padding, precision, tiled):
    x = torch.randn(shape)
    w = torch.randn(6, shape[1], 5, 3)
    g = geometry(x, w, stride, padding, 1)
    plan = fi.make_plan(g, False, Meta(16, 16, 16, 4, 2), precision)
    n, hf, wf, cf = plan.folded_shape
    assert cf % 4 == 0 and cf >= shape[1] * stride[0] * stride[1]
    assert ("WB" in plan.fold_constexprs) == tiled
    if tiled and shape[1] == 33:
        assert plan.fold_constexprs["CP"] == 64 and plan.fold_constexprs["WB"] < wf  # more than one block a row
    want = space_to_depth(x, stride, padding, hf, wf, cf)
    want = round_to_tf32(want) if precision == "tf32" else want
    for laid_out in (x, x.contiguous(memory_format=torch.channels_last)):
        got = fi.fold(laid_out, plan)
        assert got.numel() >= plan.rows * cf and plan.rows % 16 == 0  # the descriptor's rows fit in the buffer
        assert torch.equal(got[:want.numel()].view(want.shape), want)


def test_l1_50_geometry_matches_cudnns_tf32_result_through_the_column_split():
    """KernelBench L1 #50's convolution (3 → 96 channels, 11×11, stride 4, padding 2) on a smaller image: folded to
    a 3×3 over 48 channels, the 96 output channels as 64 + 32 columns at BLOCK_N 128; every output written, and
    within 1e-5 of cuDNN's TF32 rule (the judge's allclose is 1e-4)."""
    g = torch.Generator().manual_seed(50)
    x = torch.rand(2, 3, 39, 43, generator=g)
    conv = torch.nn.Conv2d(3, 96, 11, stride=4, padding=2)
    w, b = conv.weight.detach(), conv.bias.detach()
    meta = Meta(32, 128, 32, 4, 2)
    plan = fi.make_plan(geometry(x, w, 4, 2, 1), True, meta, "tf32")
    assert plan.taps == (3, 3) and plan.folded_shape[3] == 48 and plan.constexprs["SPLIT"]
    assert plan.row_pad == 160  # 3 taps × 48 channels, padded to whole BLOCK_K steps
    out = torch.full((2, 96, 9, 10), float("nan"))
    fold_igemm.launch(x, w, b, 4, 2, 1, meta, "tf32", out=out)
    assert not out.isnan().any()
    torch.testing.assert_close(out.double(), tf32_ref(x, w, b, 4, 2), rtol=1e-5, atol=1e-5)


def test_the_column_split_takes_three_quarters_of_a_tile_and_needs_16_wide_parts():
    assert fi.split_columns(96, 128) and fi.split_columns(65, 128) and fi.split_columns(48, 64)
    assert not fi.split_columns(97, 128) and not fi.split_columns(64, 128)  # more than 3/4; or half a tile is enough
    assert not fi.split_columns(24, 32)  # a 8-wide part: tl.dot takes 16 at least


@pytest.mark.parametrize("c_out,block_n", [(40, 64), (20, 16), (130, 64)])
def test_several_column_tiles_and_split_tiles_cover_every_channel(c_out, block_n):
    g = torch.Generator().manual_seed(c_out)
    x, w, b = torch.randn(1, 2, 11, 9, generator=g), torch.randn(c_out, 2, 4, 4, generator=g), torch.randn(c_out, generator=g)
    out = torch.full((1, c_out, 5, 4), float("nan"))
    fold_igemm.launch(x, w, b, 2, 1, 1, Meta(16, block_n, 16, 4, 2), "ieee", out=out)
    torch.testing.assert_close(out.double(), F.conv2d(x.double(), w.double(), b.double(), 2, 1), rtol=1e-5, atol=1e-5)


def test_refuses_dilation_in_one_line():
    with pytest.raises(UnsupportedProblem, match=r"fold_igemm takes dilation 1 only, got \[2, 1\]"):
        fold_igemm.launch(torch.rand(1, 3, 12, 12), torch.rand(4, 3, 3, 3), None, 2, 0, (2, 1), Meta(16, 16, 16, 4, 2))


def test_the_weight_is_packed_again_when_it_changes():
    x, w = torch.rand(1, 3, 14, 14), torch.rand(8, 3, 5, 5)
    first = fold_igemm.launch(x, w, None, 2, 1, 1, Meta(16, 16, 16, 4, 2), "ieee").out.clone()
    with torch.no_grad():
        w.mul_(2)  # in place, as an optimiser step: a new version
    second = fold_igemm.launch(x, w, None, 2, 1, 1, Meta(16, 16, 16, 4, 2), "ieee").out
    torch.testing.assert_close(second, 2 * first, rtol=1e-5, atol=1e-5)


def test_a_pin_naming_fold_igemm_runs_it_for_either_layout(tmp_path, monkeypatch):
    """convtune.conv2d where the key's pin (in implicit_gemm's section for NCHW, and for a 3-channel channels_last
    call too: nhwc_igemm takes 16 or more) names fold_igemm: the plan is the fold's, the output in the call's layout,
    cuDNN's TF32 result, and the caller's input untouched."""
    g = torch.Generator().manual_seed(7)
    x = torch.rand(2, 3, 23, 27, generator=g)
    w, b = torch.randn(20, 3, 7, 7, generator=g) * 0.1, torch.randn(20, generator=g)
    f = tmp_path / "pins.yaml"
    monkeypatch.setenv(pins.ENV_VAR, str(f))
    for inp, layout in ((x, "nchw"), (x.contiguous(memory_format=torch.channels_last), "channels_last")):
        key = f"n2-c3-h23-w27-k20-r7x7-s2x2-p3x3-d1x1-g1-bias-{layout}-float32/tf32"
        pins.write_pin(f, "interpreter", "implicit_gemm", key, pins.KernelPin("fold_igemm", Meta(16, 32, 16, 4, 2)), {})
        dispatch.forget()
        before = inp.clone()
        out = convtune.conv2d(inp, w, b, stride=2, padding=3, precision="tf32")
        [plan] = functional.cached_plans()
        assert isinstance(plan, fi.LaunchPlan)
        assert out.is_contiguous(memory_format=torch.channels_last if layout == "channels_last" else torch.contiguous_format)
        torch.testing.assert_close(out.double(), tf32_ref(inp, w, b, 2, 3), rtol=1e-5, atol=1e-5)
        assert torch.equal(inp, before)
    dispatch.forget()


@pytest.mark.parametrize("out_cl", [False, True])
def test_the_one_image_check_runs_the_plans_binary_on_a_batch_of_one(out_cl):
    """_right_at (llvm_opt's check of a new binary; on a GPU only, called here through the interpreter): the plan cut
    to one image, the descriptor's rows still a multiple of 16, agrees with float64."""
    x, w, b = torch.rand(3, 3, 30, 26), torch.randn(96, 3, 11, 11) * 0.05, torch.randn(96)
    fmt = torch.channels_last if out_cl else torch.contiguous_format
    out = torch.empty(3, 96, 6, 5, memory_format=fmt)
    plan = fi.make_plan(geometry(x, w, 4, 2, 1), True, Meta(32, 128, 32, 4, 2), "tf32", out_cl)
    assert plan.rows % 16 == 0 and plan.constexprs["SPLIT"]
    assert fi._right_at("O3", plan, w, b, out)


def test_a_pin_naming_fold_igemm_for_a_dilated_call_is_refused_in_one_line_that_names_the_pin(tmp_path, monkeypatch):
    """promote never pins fold_igemm to a dilated call (it refuses them), but a pins file written by hand can: the call
    fails with the kernel's reason and the pin it came from, and nothing runs."""
    f = tmp_path / "pins.yaml"
    monkeypatch.setenv(pins.ENV_VAR, str(f))
    key = "n1-c3-h12-w12-k4-r3x3-s2x2-p0x0-d2x1-g1-nobias-nchw-float32/tf32"
    pins.write_pin(f, "interpreter", "implicit_gemm", key, pins.KernelPin("fold_igemm", Meta(16, 16, 16, 4, 2)), {})
    dispatch.forget()
    with pytest.raises(UnsupportedProblem) as e:
        convtune.conv2d(torch.rand(1, 3, 12, 12), torch.rand(4, 3, 3, 3), None, stride=2, dilation=(2, 1))
    assert str(e.value) == (f"fold_igemm takes dilation 1 only, got [2, 1]: the kernel of pin interpreter / fold_igemm / "
                            f"{key} in {f}; pin this call to another kernel or to torch")
    assert not functional.cached_plans()
    dispatch.forget()
