"""nhwc_split_n (kernels/variants/nhwc_split_n.py): how the output channels are split between the two launches, the kernel's
sums in the interpreter (both launches, one after the other), its one-time check judging each launch by its own
channels, and the library running it where a pin names it. The second stream is GPU-only: tests/gpu_scripts/nhwc_split_n.py
(test_gpu.py)."""

import itertools

import pytest
import torch
import torch.nn.functional as F

import convtune
from convtune import kernels
from convtune.library import dispatch, functional
from convtune.kernels import Meta
from convtune import pins
from convtune.kernels.variants import nhwc_igemm
from convtune.kernels.variants import nhwc_split_n as sn
from convtune.kernels.conv_args import geometry
from convtune.kernels.precision import round_to_tf32_even


@pytest.mark.parametrize("c_out, block_n", list(itertools.product([1, 16, 20, 100, 128, 200, 256, 300, 384, 448, 600],
                                                                   [16, 64, 128, 256])))
def test_every_output_channel_is_in_exactly_one_launch(c_out, block_n):
    meta = Meta(128, block_n, 32, 8, 4)
    parts = sn.split_channels(c_out, meta)
    assert 1 <= len(parts) <= 2
    covered = []
    for n_from, n_count, tile in parts:
        assert n_from % tile.BLOCK_N == 0  # the kernel's first column tile is N_FROM // BLOCK_N
        covered += range(n_from, n_from + n_count)
    assert covered == list(range(c_out))
    whole = c_out // block_n * block_n
    if whole:
        assert parts[0] == (0, whole, meta)  # the configuration's own tiles first
    if c_out % block_n:
        n_from, n_count, tile = parts[-1]
        assert (n_from, n_count) == (whole, c_out % block_n) and tile.BLOCK_N <= min(block_n, 128)
        assert tile.BLOCK_N >= min(n_count, 128) and (tile.BLOCK_M, tile.num_warps) == (128, 4)


def test_alexnet_conv4_runs_its_256_wide_tiles_and_the_128_channels_left_over_in_two_launches():
    g = geometry(torch.zeros(256, 384, 13, 13), torch.zeros(384, 384, 3, 3), 1, 1, 1)
    plan = sn.make_plan(g, True, sn.default_meta(384, 1, 13), "tf32")
    assert [(p.n_from, p.n_count, p.meta.short()) for p in plan.parts] == [
        (0, 256, "M128-N256-K32-w8-s4"), (256, 128, "M128-N128-K32-w4-s3")]
    assert [p.grid for p in plan.parts] == [(338,), (338,)] and plan.rounds
    assert sn.make_plan(g, True, Meta(128, 128, 32, 4, 3), "tf32").parts[0].grid == (1014,)  # one launch


def _case(n, c, k, r, h, w, layout, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, c, h, w, generator=g).contiguous(memory_format=layout)
    return x, torch.randn(k, c, r, r, generator=g) / (c * r * r) ** 0.5, torch.randn(k, generator=g)


@pytest.mark.parametrize("n, c, k, r, h, w, meta, precision, in_cl, out_cl, bias", [
    (2, 16, 48, 3, 5, 6, Meta(16, 32, 16, 4, 2), "tf32", True, True, True),  # 32 whole + 16 left over
    (2, 16, 48, 3, 5, 6, Meta(16, 32, 16, 4, 3), "ieee", False, False, False),
    (1, 20, 40, 3, 4, 4, Meta(16, 32, 16, 4, 2), "tf32", True, False, True),  # C % 4 != 0: the weight by tl.load
    (3, 8, 24, 1, 4, 4, Meta(16, 16, 16, 4, 2), "tf32", False, True, True),  # nothing left over: one launch
    (2, 12, 20, 3, 6, 5, Meta(16, 32, 16, 4, 2), "tf32", True, True, False),  # fewer than BLOCK_N: the rest alone
])
def test_both_launches_sum_the_convolution_in_the_interpreter(n, c, k, r, h, w, meta, precision, in_cl, out_cl, bias):
    x, wt, b = _case(n, c, k, r, h, w, torch.channels_last if in_cl else torch.contiguous_format)
    b = b if bias else None
    fmt = torch.channels_last if out_cl else torch.contiguous_format
    out = torch.full((n, k, h, w), float("nan")).contiguous(memory_format=fmt)
    before = x.clone()
    y = sn.launch(x, wt, b, 1, r // 2, 1, meta, precision, out=out).out
    xr, wr = (round_to_tf32_even(x), round_to_tf32_even(wt)) if precision == "tf32" else (x, wt)
    ref = F.conv2d(xr.double(), wr.double(), None if b is None else b.double(), 1, r // 2)
    assert y is out and not y.isnan().any() and torch.equal(x, before)
    torch.testing.assert_close(y.double(), ref, rtol=1e-5, atol=1e-5)
    whole = nhwc_igemm.launch_preround(x, wt, b, 1, r // 2, 1, meta, precision).out
    torch.testing.assert_close(y, whole, rtol=1e-5, atol=1e-5)


def test_the_one_time_check_judges_a_launch_by_its_own_channels(monkeypatch):
    """Each launch is a binary checked once: the check runs it alone, so the other launch's channels stay NaN and
    must not fail it; a launch that writes nothing must."""
    x, wt, b = _case(1, 16, 48, 3, 6, 6, torch.channels_last)
    plan = sn.make_plan(geometry(x, wt, 1, 1, 1), True, Meta(16, 32, 16, 4, 2), "tf32")
    out = torch.empty(1, 48, 6, 6).contiguous(memory_format=torch.channels_last)
    assert len(plan.parts) == 2 and all(sn._right_at("none", p, x, wt, b, out) for p in plan.parts)
    monkeypatch.setattr(sn, "_launch", lambda *a: None)
    assert not any(sn._right_at("none", p, x, wt, b, out) for p in plan.parts)


def test_a_pin_naming_nhwc_split_n_runs_it_through_the_library_in_either_layout(tmp_path, monkeypatch):
    """convtune.conv2d under a pin that names nhwc_split_n: its plan (two launches), the output in the call's layout,
    torch's values at tf32 with the input rounded before the kernel, and the caller's input untouched."""
    f = tmp_path / "pins.yaml"
    monkeypatch.setenv(pins.ENV_VAR, str(f))
    m = Meta(16, 16, 16, 2, 2)
    x_cl, w, b = _case(2, 16, 24, 3, 9, 7, torch.channels_last, seed=5)
    for inp, section, layout in ((x_cl.contiguous(), "implicit_gemm", "nchw"), (x_cl, "nhwc_igemm", "channels_last")):
        key = f"n2-c16-h9-w7-k24-r3x3-s1x1-p1x1-d1x1-g1-bias-{layout}-float32/tf32"
        pins.write_pin(f, "interpreter", section, key, pins.KernelPin("nhwc_split_n", m), {})
        dispatch.forget()
        before = inp.clone()
        y = convtune.conv2d(inp, w, b, padding=1, precision="tf32")
        [plan] = functional.cached_plans()
        assert isinstance(plan, sn.LaunchPlan) and plan.rounds and [p.n_count for p in plan.parts] == [16, 8]
        assert y.shape == (2, 24, 9, 7) and y.is_contiguous(
            memory_format=torch.channels_last if layout == "channels_last" else torch.contiguous_format)
        ref = F.conv2d(round_to_tf32_even(inp).double(), round_to_tf32_even(w).double(), b.double(), 1, 1)
        torch.testing.assert_close(y.double(), ref, rtol=1e-5, atol=1e-5)
        assert torch.equal(inp, before) and inp.stride() == before.stride()
    dispatch.forget()


def test_it_is_a_library_kernel_the_tracker_sweeps_and_verify_draws():
    assert "nhwc_split_n" in kernels.LIBRARY_KERNELS and "nhwc_split_n" in kernels.GENERAL
    v = kernels.get_variant("nhwc_split_n")
    assert v.tf32_ties == "even" and v.source_hash == sn.SOURCE.hash
    assert v.default_meta(384, 1, 13) == Meta(128, 256, 32, 8, 4)  # 256 whole + 128 left over
    assert v.default_meta(256, 1, 13) == nhwc_igemm.default_meta_preround(256, 1, 13)  # nothing left over
