"""Every kernel variant against torch on random shapes (Triton interpreter): odd sizes, strides, paddings,
dilations, bias on/off, K not a multiple of BLOCK_K, M not a multiple of BLOCK_M."""

import re
import weakref

import pytest
import torch
import torch.nn.functional as F
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from convtune.config import TOLERANCE
from convtune.errors import UnsupportedProblem
from convtune.kernels import GENERAL, VARIANTS, Meta, get_variant
from convtune.kernels.precision import host_rounding, round_tf32, round_tf32_even, round_to_tf32, round_to_tf32_even

seed = get_variant("seed")


@st.composite
def conv_cases(draw):
    c, kh, kw = draw(st.integers(1, 4)), draw(st.integers(1, 5)), draw(st.integers(1, 5))
    sh, sw, ph, pw = draw(st.integers(1, 3)), draw(st.integers(1, 3)), draw(st.integers(0, 2)), draw(st.integers(0, 2))
    dh, dw = draw(st.integers(1, 2)), draw(st.integers(1, 2))
    h = draw(st.integers(max(1, dh * (kh - 1) + 1 - 2 * ph), 13))
    w = draw(st.integers(max(1, dw * (kw - 1) + 1 - 2 * pw), 13))
    case = dict(n=draw(st.integers(1, 2)), c=c, h=h, w=w, k=draw(st.integers(1, 20)), kh=kh, kw=kw,
                stride=(sh, sw), padding=(ph, pw), dilation=(dh, dw), bias=draw(st.booleans()),
                meta=draw(st.sampled_from([Meta(16, 16, 16, 4, 1), Meta(32, 16, 16, 2, 2), Meta(16, 32, 32, 4, 3)])),
                precision=draw(st.sampled_from(sorted(TOLERANCE))), seed=draw(st.integers(0, 2**16)),
                variant=draw(st.sampled_from(GENERAL)))
    if case["variant"] == "fold_igemm":  # dilation 1 only (test_fold_igemm: its refusal of others)
        case["dilation"] = (1, 1)
    return case


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(conv_cases())
def test_matches_float64_reference(case):
    g = torch.Generator().manual_seed(case["seed"])
    x = torch.randn(case["n"], case["c"], case["h"], case["w"], generator=g)
    w = torch.randn(case["k"], case["c"], case["kh"], case["kw"], generator=g)
    b = torch.randn(case["k"], generator=g) if case["bias"] else None
    ref = F.conv2d(x.double(), w.double(), None if b is None else b.double(), case["stride"], case["padding"],
                   case["dilation"])
    out = torch.full(ref.shape, float("nan"))  # poisoned: every element must be written
    get_variant(case["variant"]).launch(x, w, b, case["stride"], case["padding"], case["dilation"], case["meta"],
                                        case["precision"], out=out)
    assert not torch.isnan(out).any(), "some outputs were never written"
    # the error relative to the size of the products summed (conv of |x| and |w|, plus |b|): an output that cancels
    # (1.66 from products summing in magnitude to 11.6) loses relative accuracy to rounding alone; at tf32, one
    # product dropped is still ~1/100 of that size, five times the tolerance
    size = F.conv2d(x.double().abs(), w.double().abs(), None if b is None else b.double().abs(), case["stride"],
                    case["padding"], case["dilation"])
    rel = (out.double() - ref).norm() / size.norm().clamp_min(1e-30)
    assert rel <= TOLERANCE[case["precision"]], f"error {rel:.3g} of the products' size for {case}"


@pytest.mark.parametrize("name", GENERAL)
def test_output_is_allocated_when_not_given(name):
    x, w = torch.rand(1, 2, 6, 7), torch.rand(3, 2, 3, 3)
    got = get_variant(name).launch(x, w, None, 1, 1, 1, Meta(16, 16, 16, 4, 1), "ieee").out
    assert got.shape == (1, 3, 6, 7)
    torch.testing.assert_close(got, F.conv2d(x, w, None, 1, 1), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("make,match", [
    (lambda: (torch.rand(1, 2, 6, 6).transpose(2, 3), torch.rand(3, 2, 3, 3), None), "contiguous"),
    (lambda: (torch.rand(1, 2, 6, 6, dtype=torch.float64), torch.rand(3, 2, 3, 3), None), "float32"),
    (lambda: (torch.rand(1, 2, 6, 6), torch.rand(3, 4, 3, 3), None), "input channels"),
    (lambda: (torch.rand(1, 2, 6, 6), torch.rand(3, 2, 3, 3), torch.rand(4)), "expected bias to be 1-dimensional with 3 elements"),
    (lambda: (torch.rand(2, 6, 6), torch.rand(3, 2, 3, 3), None), "4-d"),
])
@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_launcher_rejects_what_it_does_not_support(make, match, name):
    x, w, b = make()
    if name != "seed" and match == "contiguous":
        pytest.skip(f"{name} reads any input layout (it converts inside the call): test_reads_any_input_layout...")
    with pytest.raises(UnsupportedProblem, match=match):
        get_variant(name).launch(x, w, b, 1, 0, 1, Meta(16, 16, 16, 4, 1))


def test_nhwc_weight_packs_aligned_for_tma():
    from convtune.kernels.variants.nhwc_igemm import pack_weight, tma_fits

    storage = torch.randn(1 + 9 * 8 * 3 * 2)
    w = storage[1:].view(9, 3, 2, 8).permute(0, 3, 1, 2)  # channels_last, 4 bytes past a 16-byte boundary
    packed = pack_weight(w, False)
    assert packed.data_ptr() % 16 == 0 and torch.equal(packed, w.permute(0, 2, 3, 1))
    assert tma_fits(8) and not tma_fits(6)


@pytest.mark.parametrize("precision", ["ieee", "tf32"])
@pytest.mark.parametrize("cin", [6, 8])  # 8: nhwc_igemm's weight tiles come through a TMA descriptor (tma_fits)
@pytest.mark.parametrize("name", [n for n in GENERAL if VARIANTS[n].library is not None])
def test_reads_any_input_layout_and_writes_the_output_layout_asked_for(name, precision, cin):
    g = torch.Generator().manual_seed(3)
    x, w, b = torch.randn(2, cin, 7, 8, generator=g), torch.randn(9, cin, 3, 2, generator=g), torch.randn(9, generator=g)
    ref = F.conv2d(x.double(), w.double(), b.double(), 1, (1, 0))
    kernel = get_variant(name)
    outs = []
    for laid_out in (x, x.contiguous(memory_format=torch.channels_last), x.transpose(2, 3).contiguous().transpose(2, 3)):
        for fmt in (torch.contiguous_format, torch.channels_last):
            out = torch.empty(ref.shape, memory_format=fmt).fill_(float("nan"))
            kernel.launch(laid_out, w, b, 1, (1, 0), 1, Meta(16, 16, 16, 4, 2), precision, out=out)
            assert out.is_contiguous(memory_format=fmt) and not torch.isnan(out).any()
            outs.append(out)
    allocated = kernel.launch(x, w, b, 1, (1, 0), 1, Meta(16, 16, 16, 4, 2), precision).out
    # allocated: nhwc_igemm's channels_last (as torch's output for the input it reads), implicit_gemm's and fold_igemm's NCHW
    assert allocated.is_contiguous(memory_format=torch.channels_last if name.startswith("nhwc") else torch.contiguous_format)
    for out in outs:
        assert torch.equal(out, outs[0])  # the same numbers whatever the layouts
    assert (outs[0].double() - ref).norm() / ref.norm() <= TOLERANCE[precision]
    with pytest.raises(UnsupportedProblem, match="contiguous or channels_last"):
        kernel.launch(x, w, b, 1, (1, 0), 1, Meta(16, 16, 16, 4, 2), precision, out=torch.empty(2, 9, 8, 7).transpose(2, 3))


@pytest.mark.parametrize("name", [n for n in GENERAL if VARIANTS[n].library is not None])
def test_the_prepared_call_checks_once_and_launches_what_launch_does(name):
    """KernelVariant.prepared (the contest's timed call): the plan made once, then each call the layout copy and the
    launch, writing the given output with launch's bits, again on the second call; what launch refuses, it refuses."""
    g = torch.Generator().manual_seed(8)
    x, w, b = torch.randn(2, 16, 7, 6, generator=g), torch.randn(12, 16, 3, 3, generator=g), torch.randn(12, generator=g)
    v, meta = get_variant(name), Meta(16, 16, 16, 4, 2)
    for inp in (x, x.contiguous(memory_format=torch.channels_last)):
        for fmt in (torch.contiguous_format, torch.channels_last):
            want = torch.empty(2, 12, 7, 6, memory_format=fmt)
            v.launch(inp, w, b, 1, 1, 1, meta, "tf32", out=want)
            out = torch.full_like(want, float("nan"))
            call = v.prepared(inp, w, b, 1, 1, 1, meta, "tf32", out=out)
            assert call() is out and torch.equal(out, want)
            out.fill_(float("nan"))
            assert call() is out and torch.equal(out, want)  # the closure runs again, as a timing loop calls it
    with pytest.raises(UnsupportedProblem, match="input channels"):
        v.prepared(x, w[:, :8].contiguous(), b, 1, 1, 1, meta, "tf32")
    assert get_variant("seed").prepared is None  # not a library kernel: the contest times its launch


def test_groups_refused():
    with pytest.raises(UnsupportedProblem, match="groups=2"):
        seed.launch(torch.rand(1, 2, 6, 6), torch.rand(2, 1, 3, 3), None, 1, 0, 1, Meta(16, 16, 16, 4, 1), groups=2)


def test_source_hash_is_the_identity_of_the_jit_code_it_launches():
    from convtune.kernels.identity import kernel_identity
    from convtune.kernels.variants import seed as module

    assert seed.source_hash == kernel_identity(module.VERSION, [module._conv2d_seed_kernel, round_tf32])
    assert re.fullmatch(r"[0-9a-f]{12}", seed.source_hash)
    assert seed.source_hash != kernel_identity(module.VERSION + 1, [module._conv2d_seed_kernel, round_tf32])
    by_hash = {}
    for name, v in VARIANTS.items():  # kernels of different jit code never share an identity
        by_hash.setdefault(v.source_hash, []).append(name)
    shared = [names for names in by_hash.values() if len(names) > 1]
    assert all({get_variant(n).entry_points for n in names} == {get_variant(names[0]).entry_points} for names in shared)


def test_default_configuration_per_problem_class():
    ig = get_variant("implicit_gemm")
    assert ig.default_meta(96, 4, 224) == Meta(128, 128, 16, 4, 6)  # L1 #50: the VEC=4 gather path, rounding
    assert ig.default_meta(96, 4, 224, "tf32_trunc") == Meta(256, 128, 16, 8, 4)  # truncating
    assert ig.default_meta(64, 2, 224) == Meta(128, 64, 32, 4, 3)  # ResNet-50 stem class
    assert ig.default_meta(384, 1, 13) == Meta(64, 128, 32, 4, 3)
    assert ig.default_meta(96, 4, 224, "tf32x3") == Meta(128, 128, 32, 8, 3)  # 256-row tiles spill under tf32x3
    assert get_variant("seed").default_meta(96, 4, 224) == Meta(32, 64, 32, 4, 2)  # the brief's NCU config
    nhwc = get_variant("nhwc_igemm")
    assert nhwc.default_meta(384, 1, 13) == Meta(128, 128, 32, 8, 3)  # the H200 sweep's winners
    assert nhwc.default_meta(192, 1, 27) == Meta(64, 256, 32, 4, 3)
    assert nhwc.default_meta(128, 1, 28) == Meta(64, 128, 32, 4, 3)
    assert nhwc.default_meta(64, 1, 56) == Meta(64, 64, 32, 4, 3)
    assert nhwc.default_meta(384, 1, 13, "tf32x3") == Meta(64, 64, 32, 4, 3)
    pre = get_variant("nhwc_preround")  # its own sweep on a rounded input
    assert pre.default_meta(384, 1, 13) == Meta(128, 128, 32, 4, 3)
    assert pre.default_meta(256, 1, 56) == pre.default_meta(192, 1, 27) == Meta(128, 256, 32, 8, 4)
    assert pre.default_meta(128, 1, 28) == Meta(128, 128, 32, 8, 3)
    assert pre.default_meta(64, 1, 56) == nhwc.default_meta(64, 1, 56)  # not swept: nhwc_igemm's
    assert pre.default_meta(384, 1, 13, "ieee") == nhwc.default_meta(384, 1, 13, "ieee")  # nothing to round first
    fold = get_variant("fold_igemm")  # L1 #50's best on the H200 (commit ac19ec3), its 96 channels as 64 + 32
    assert fold.default_meta(96, 4, 224) == Meta(128, 128, 32, 4, 4)
    assert fold.default_meta(64, 2, 224) == Meta(128, 64, 32, 4, 4)
    assert fold.default_meta(96, 4, 224, "tf32x3") == Meta(64, 128, 16, 4, 3)



def test_round_to_tf32_is_nearest_with_ties_away_from_zero():
    one_ulp = 2.0 ** -10  # TF32 keeps 10 mantissa bits
    x = torch.tensor([1 + one_ulp / 2, -(1 + one_ulp / 2), 1 + one_ulp / 2 - 2.0 ** -23, 1 + 3 * one_ulp / 2, 3.0, 0.0])
    assert round_to_tf32(x).tolist() == [1 + one_ulp, -(1 + one_ulp), 1.0, 1 + 2 * one_ulp, 3.0, 0.0]


def test_round_to_tf32_even_breaks_ties_to_even_and_rounds_the_rest_to_nearest():
    one_ulp = 2.0 ** -10
    x = torch.tensor([1 + one_ulp / 2, -(1 + one_ulp / 2), 1 + 3 * one_ulp / 2, -(1 + 3 * one_ulp / 2),
                      1 + one_ulp / 2 + 2.0 ** -23, 1 + one_ulp / 2 - 2.0 ** -23, 3.0, 0.0])
    assert round_to_tf32_even(x).tolist() == [1.0, -1.0, 1 + 2 * one_ulp, -(1 + 2 * one_ulp), 1 + one_ulp, 1.0, 3.0, 0.0]
    assert host_rounding("even") is round_to_tf32_even and host_rounding("away") is round_to_tf32
    with pytest.raises(ValueError, match="ties='up'"):
        host_rounding("up")


def with_ties(t: torch.Tensor, every: int = 5) -> torch.Tensor:
    """`t` with every `every`-th element moved to a TF32 rounding tie (its 13 low mantissa bits 0x1000), so that the
    way ties are broken shows in a result (random data has one tie in 8192)."""
    bits = t.contiguous().view(torch.int32).clone()
    flat = bits.view(-1)
    flat[::every] = (flat[::every] & -8192) | 0x1000
    return bits.view(torch.float32)


@pytest.mark.parametrize("jitted,host", [(round_tf32, round_to_tf32), (round_tf32_even, round_to_tf32_even)])
def test_in_kernel_rounding_equals_the_host_rounding(jitted, host):
    import triton
    import triton.language as tl

    @triton.jit
    def k(x_ptr, y_ptr, N: tl.constexpr, FN: tl.constexpr):
        offs = tl.arange(0, N)
        tl.store(y_ptr + offs, FN(tl.load(x_ptr + offs)))

    bits = torch.randint(-2**31, 2**31 - 1, (4096,), dtype=torch.int64, generator=torch.Generator().manual_seed(1))
    x = bits.to(torch.int32).view(torch.float32)
    x = with_ties(torch.where(torch.isfinite(x), x, torch.ones_like(x)), every=3)
    y = torch.empty_like(x)
    k[(1,)](x, y, N=4096, FN=jitted)
    assert torch.equal(y.view(torch.int32), host(x).view(torch.int32))


@pytest.mark.parametrize("kw,pad_w,vec", [(11, 2, 4), (7, 3, 2), (5, 0, 4), (3, 1, 1), (1, 0, 4), (4, 5, 2)])
@pytest.mark.parametrize("round_tf32", [True, False])
def test_the_one_launch_weight_pack_equals_pack_weight_bitwise(kw, pad_w, vec, round_tf32):
    from convtune.kernels.variants import implicit_gemm as ig
    from convtune.kernels import weight_pack

    w = torch.randn(5, 3, 2, kw, generator=torch.Generator().manual_seed(kw * 10 + pad_w))
    ref = ig.pack_weight(w, pad_w, vec, round_tf32)[0]
    kwp, j0 = ig.row_window(kw, pad_w, vec)
    got = weight_pack.pack(w, kwp, weight_pack.window_start(kw, kwp, pad_w, j0), round_tf32)
    assert got.shape == ref.shape and torch.equal(got.view(torch.int32), ref.contiguous().view(torch.int32))
    if vec > 1 or round_tf32:  # the cache the library launches from uses it, and repacks after an in-place update
        assert torch.equal(ig.packed_weight(w, pad_w, vec, round_tf32), ref)
        w.mul_(-3)
        assert torch.equal(ig.packed_weight(w, pad_w, vec, round_tf32), ig.pack_weight(w, pad_w, vec, round_tf32)[0])


def test_a_row_that_does_not_fit_its_window_is_refused():
    from convtune.kernels import weight_pack

    with pytest.raises(ValueError, match="does not fit"):
        weight_pack.window_start(kw=5, kwp=4, pad_w=0, j0=0)


@pytest.mark.parametrize("name", GENERAL)
def test_tf32_rounds_both_operands_to_nearest_as_cudnn_does(name):
    """The interpreter's dot is exact fp32, so `tf32` output must be the conv of the operands rounded by the variant's
    rule (ties away from zero, or to even for the nhwc kernels: cuDNN's rule for the layers each serves), and
    `tf32_trunc` (rounding nothing here) the conv of the originals: the rounding and its ties show, operand by
    operand (a fifth of the operands sit on a tie)."""
    g = torch.Generator().manual_seed(3)
    x, w = torch.rand(2, 8, 12, 16, generator=g), torch.rand(7, 8, 3, 4, generator=g) - 0.5  # width, stride 4: VEC=4
    x, w = with_ties(x), with_ties(w, every=7)
    args = ((2, 4), (1, 2), 1)
    rule = get_variant(name).tf32_ties
    rounding, other = host_rounding(rule), host_rounding("away" if rule == "even" else "even")
    exact = F.conv2d(x.double(), w.double(), None, *args)
    rounded = F.conv2d(rounding(x).double(), rounding(w).double(), None, *args)
    half_rounded = F.conv2d(rounding(x).double(), w.double(), None, *args)  # as if the weights were missed
    other_ties = F.conv2d(other(x).double(), other(w).double(), None, *args)
    meta = Meta(16, 16, 16, 4, 2)
    got = get_variant(name).launch(x, w, None, *args, meta, "tf32").out.double()
    trunc = get_variant(name).launch(x, w, None, *args, meta, "tf32_trunc").out.double()
    assert (got - rounded).abs().max() < 1e-5 < min((half_rounded - rounded).abs().max(), (other_ties - rounded).abs().max())
    assert (trunc - exact).abs().max() < 1e-5 < (rounded - exact).abs().max()


@pytest.mark.parametrize("shape,tile", [
    ((2, 70, 9, 11), (64, 64, 4)),   # channels and positions both past one tile, neither a multiple
    ((3, 17, 1, 130), (64, 64, 4)),  # fewer channels than a tile, positions over two
    ((1, 128, 4, 4), (32, 16, 2)),   # exact tiles
    ((2, 1, 6, 7), (64, 64, 4)),     # one channel: already channels_last-contiguous, no copy of ours
    ((2, 19, 1, 1), (64, 64, 4)),    # one position: likewise
])
def test_our_nchw_to_channels_last_copy_is_torchs_bit_for_bit(shape, tile):
    """kernels.layout.to_channels_last: the same values and strides as torch's copy, whatever the tile edges."""
    from convtune.kernels.layout import to_channels_last

    x = torch.randn(*shape, generator=torch.Generator().manual_seed(sum(shape)))
    y = to_channels_last(x, *tile)
    want = x.contiguous(memory_format=torch.channels_last)
    assert torch.equal(y, want) and y.stride() == want.stride()
    assert y.is_contiguous(memory_format=torch.channels_last)


@pytest.mark.parametrize("shape", [(2, 70, 9, 11), (2, 3, 5, 7)])  # our copy; few channels: torch's copy, then a pass
def test_the_copy_that_rounds_gives_the_host_roundings_bits_in_channels_last(shape):
    from convtune.kernels.layout import rounded_tf32, to_channels_last

    x = with_ties(torch.randn(*shape, generator=torch.Generator().manual_seed(sum(shape))) * 1e3)
    want = round_to_tf32_even(x).contiguous(memory_format=torch.channels_last)  # the nhwc kernels' ties (TF32_TIES)
    y = to_channels_last(x, round_to_nearest_tf32=True)
    assert torch.equal(y, want) and y.stride() == want.stride() and not torch.equal(y, x)
    cl = x.contiguous(memory_format=torch.channels_last)
    r = to_channels_last(cl, round_to_nearest_tf32=True)  # already channels_last: a rounded copy, not the input
    assert r.data_ptr() != cl.data_ptr() and torch.equal(r, want) and r.stride() == want.stride()
    assert torch.equal(cl, x)  # the input is left as it was
    for laid_out in (x, cl, x.transpose(2, 3)):  # dense in two orders (the pass), and strided (the host rounding)
        got = rounded_tf32(laid_out)
        assert torch.equal(got, round_to_tf32_even(laid_out))
        if laid_out.is_contiguous() or laid_out.is_contiguous(memory_format=torch.channels_last):
            assert got.stride() == laid_out.stride()


def test_a_16_bit_nchw_input_takes_our_copy_bit_for_bit_and_is_never_rounded(monkeypatch):
    """float16 (the interpreter's 16-bit dtype; bfloat16 on the GPU: tests/gpu_scripts/layout_copy.py) goes through our
    copy, with its dtype in the bound launch's key; asking to round a 16-bit tensor to TF32 is an error."""
    from convtune.kernels import layout
    from convtune.kernels.layout import to_channels_last

    kernel, launched = layout._nchw_to_nhwc_kernel, []

    class Spy:
        def __getitem__(self, grid):
            def launch(x, *args, **kwargs):
                launched.append(x.dtype)
                return kernel[grid](x, *args, **kwargs)
            return launch
    monkeypatch.setattr(layout, "_nchw_to_nhwc_kernel", Spy())
    x = torch.randn(2, 70, 9, 11, generator=torch.Generator().manual_seed(3)).half()
    y = to_channels_last(x)
    want = x.contiguous(memory_format=torch.channels_last)
    assert launched == [torch.float16] and y.dtype is torch.float16
    assert torch.equal(y.view(torch.int16), want.view(torch.int16)) and y.stride() == want.stride()
    with pytest.raises(ValueError, match="rounding to TF32 takes a float32 tensor, got torch.float16"):
        to_channels_last(x, round_to_nearest_tf32=True)

def test_our_copy_leaves_few_channels_other_dtypes_and_layouts_to_torch(monkeypatch):
    from convtune.kernels import layout
    from convtune.kernels.layout import to_channels_last

    def not_ours(*args, **kwargs):
        raise AssertionError("our copy ran")
    monkeypatch.setattr(layout, "_nchw_to_nhwc_kernel", not_ours)
    few = torch.randn(2, layout.MIN_CHANNELS - 1, 5, 3)  # torch's copy was faster with 3 channels on the H200
    assert torch.equal(to_channels_last(few), few) and to_channels_last(few).is_contiguous(
        memory_format=torch.channels_last)
    x = torch.randn(2, 32, 5, 3)
    cl = x.contiguous(memory_format=torch.channels_last)
    assert to_channels_last(cl) is cl  # already channels_last: no copy at all, as torch's
    strided = x[:, ::2]  # 16 channels, but not NCHW-contiguous
    assert torch.equal(to_channels_last(strided), strided) and to_channels_last(strided).is_contiguous(
        memory_format=torch.channels_last)
    dbl = x.double()
    assert to_channels_last(dbl).dtype is torch.float64 and torch.equal(to_channels_last(dbl), dbl)


def test_there_is_no_bound_launch_without_a_compiled_kernel():
    """kernels.runner.bound_runner: under the interpreter a launch returns no compiled kernel, and the launchers
    keep going through the JIT function (their bound launches are checked on the GPU: tests/gpu_scripts/bound_nhwc.py)."""
    from convtune.kernels import layout
    from convtune.kernels.variants import nhwc_igemm
    from convtune.kernels.runner import bound_runner

    assert bound_runner(None, (4,), nhwc_igemm._conv2d_nhwc_kernel, 7, {}) is None
    x = torch.randn(2, 16, 5, 3)
    layout.to_channels_last(x, round_to_nearest_tf32=True)
    get_variant("nhwc_preround").launch(x, torch.randn(4, 16, 3, 3), None, 1, 1, 1, Meta(16, 16, 16, 4, 2))
    assert layout._bound == {} and len(nhwc_igemm._binaries) == 0


def test_a_launch_hook_sends_a_bound_launch_through_tritons_runner_and_only_a_known_launcher_is_taken_apart():
    """kernels.runner: a bound launch calls the binary's C launch (checked on the GPU: tests/gpu_scripts/bound_launch.py)
    unless Triton would call a launch hook: a function, or its HookChain (the default) holding one. `_c_launch` takes
    apart Triton 3.6's launcher only: the C function itself, or its descriptor wrapper's closure (the C launch, the
    descriptors' indices and metadata); anything else raises, and the launch goes through Triton's runner."""
    from types import SimpleNamespace

    from triton.knobs import HookChain

    from convtune.kernels.runner import _c_launch, _hooked

    runtime = SimpleNamespace(launch_enter_hook=HookChain(), launch_exit_hook=HookChain(reversed=True))
    assert not _hooked(runtime)
    runtime.launch_exit_hook.add(print)
    assert _hooked(runtime)
    runtime.launch_exit_hook.remove(print)
    runtime.launch_enter_hook = print
    assert _hooked(runtime)
    runtime.launch_enter_hook = runtime.launch_exit_hook = None
    assert not _hooked(runtime)

    assert _c_launch(len) == (len, {})  # a C function has no code object: it is the launch

    def wrapped(launcher, tensordesc_indices, tensordesc_meta):  # the shape of Triton 3.6's wrap_handle_tensordesc
        def inner(*args):
            return launcher(*args), tensordesc_indices, tensordesc_meta
        return inner

    assert _c_launch(wrapped(len, {4, 1}, ["meta1", "meta4"])) == (len, {1: "meta1", 4: "meta4"})
    with pytest.raises(ValueError, match="without their metadata"):
        _c_launch(wrapped(len, {1}, [None]))
    with pytest.raises(ValueError, match="unknown launcher wrapper"):
        _c_launch(lambda *args: len(args))


def test_a_packed_weights_tma_descriptor_is_made_once_per_block_and_goes_when_the_packed_weight_does():
    """nhwc_tiles.weight_arg: the descriptor describes the packed weight's memory, is the same object on every call
    for one block shape, and does not keep the packed weight alive (an optimiser step replaces it)."""
    from convtune.kernels import nhwc_tiles

    cx = {"W_TMA": True, "BLOCK_N": 16, "BLOCK_K": 32}
    wp = nhwc_tiles.pack_weight(torch.randn(32, 16, 3, 3), round_tf32=False)
    d = nhwc_tiles.weight_arg(cx, wp)
    assert nhwc_tiles.weight_arg(cx, wp) is d
    assert d.base.data_ptr() == wp.data_ptr() and list(d.shape) == [32, 144] and list(d.block_shape) == [16, 32]
    other = nhwc_tiles.weight_arg({**cx, "BLOCK_K": 64}, wp)
    assert other is not d and list(other.block_shape) == [16, 64]
    assert nhwc_tiles.weight_arg({**cx, "W_TMA": False}, wp) is wp
    gone, key = weakref.ref(wp), id(wp)
    del wp
    assert gone() is None and not any(k[0] == key for k in nhwc_tiles._descriptors)


def test_every_registered_variant_has_its_conf_and_every_conf_a_variant():
    """A variant is one kernel module (it registers itself, kernels/base.py), its conf/kernel YAML and its tests; the
    registry is what every list of kernels comes from."""
    from tests.conftest import ROOT

    confs = {p.stem for p in (ROOT / "conf" / "kernel").glob("*.yaml")} - {"library"}
    assert confs == set(VARIANTS)
    assert all(v.name == name for name, v in VARIANTS.items())
    lib = {n for n, v in VARIANTS.items() if v.library is not None}
    assert lib == set(VARIANTS) - {"seed"}  # the brief's baseline is measured, never pinned by the library
    assert {n for n, v in VARIANTS.items() if v.export is not None} == {"implicit_gemm", "fold_igemm", "fused_gluon",
                                                                       "nhwc_igemm", "nhwc_preround", "nhwc_tma"}
