"""The one-time check of each compiled binary (convtune.kernels.llvm_opt and selfcheck), on the CPU: the choice
of level, the test that tells a miscompiled output from rounding, and the alignment the check inputs keep."""

import pytest
import torch
import torch.nn.functional as F

from convtune.kernels import Meta, get_variant, llvm_opt
from convtune.kernels.selfcheck import agrees, aligned_nan, aligned_random, check_inputs


@pytest.fixture(autouse=True)
def fresh_choices(monkeypatch):
    monkeypatch.delenv(llvm_opt.ENV, raising=False)
    saved = dict(llvm_opt._chosen)
    llvm_opt._chosen.clear()
    yield
    llvm_opt._chosen.clear()
    llvm_opt._chosen.update(saved)


def test_a_right_o3_binary_is_kept_and_checked_once():
    tried = []
    level = llvm_opt.choose("k", lambda lvl: tried.append(lvl) or True, lambda: "case")
    again = llvm_opt.choose("k", lambda lvl: tried.append(lvl) or True, lambda: "case")
    assert (level, again, tried) == ("O3", "O3", ["O3"])


def test_a_wrong_o3_binary_is_recompiled_at_o0():
    tried = []
    level = llvm_opt.choose("k", lambda lvl: tried.append(lvl) or lvl == "O0", lambda: "case")
    assert level == "O0" and tried == ["O3", "O0"] and llvm_opt.chosen_levels()["k"] == "O0"


def test_a_binary_wrong_at_every_level_is_refused_not_run():
    with pytest.raises(llvm_opt.KernelMiscompiled, match="wrong results at LLVM O3 and O0 for the shape"):
        llvm_opt.choose("k", lambda lvl: False, lambda: "the shape")
    assert "k" not in llvm_opt.chosen_levels()


def test_a_forced_level_skips_the_check(monkeypatch):
    monkeypatch.setenv(llvm_opt.ENV, "o2")
    assert llvm_opt.choose("k", lambda lvl: pytest.fail("checked"), lambda: "case") == "O2"
    monkeypatch.setenv(llvm_opt.ENV, "fast")
    with pytest.raises(ValueError, match="CONVTUNE_LLVM_OPT='FAST': expected one of auto, O0, O1, O2, O3"):
        llvm_opt.mode()


def test_compiling_at_is_per_block_and_restored():
    assert getattr(llvm_opt._thread, "level", "O3") == "O3"
    with llvm_opt.compiling_at("O0"):
        assert llvm_opt._thread.level == "O0"
    assert llvm_opt._thread.level == "O3"


def test_the_stage_hook_is_installed_and_answers_newer_tritons_cache_question():
    from triton import knobs

    assert llvm_opt.install() is True
    key, digest = knobs.runtime.add_stages_inspection_hook()
    assert "convtune-llvm-opt" in key and "convtune-llvm-opt" in digest


def _case(seed=0):
    g = torch.Generator().manual_seed(seed)
    x, w, b = torch.rand(1, 3, 9, 11, generator=g), torch.rand(5, 3, 3, 3, generator=g) - 0.5, torch.rand(5, generator=g)
    return x, w, b


def test_agrees_accepts_tf32_rounding_and_refuses_a_wrong_edge():
    x, w, b = _case()
    exact = F.conv2d(x.double(), w.double(), b.double(), 1, 1).float()
    tf32ish = exact * (1 + 3e-4 * torch.randn(exact.shape, generator=torch.Generator().manual_seed(1)))
    assert agrees(tf32ish, x, w, b, (1, 1), (1, 1), (1, 1), "tf32")
    assert not agrees(tf32ish, x, w, b, (1, 1), (1, 1), (1, 1), "ieee")  # 3e-4 is far beyond fp32 rounding
    edge = exact.clone()
    edge[..., 0] += 0.5  # one wrong column, as the miscompiled binaries gave at the padding
    assert not agrees(edge, x, w, b, (1, 1), (1, 1), (1, 1), "tf32")
    nan = exact.clone()
    nan[0, 0, 0, 0] = float("nan")  # an element never written
    assert not agrees(nan, x, w, b, (1, 1), (1, 1), (1, 1), "tf32")


@pytest.mark.parametrize("skew", [0, 1, 2, 3])
def test_check_inputs_keep_the_real_tensors_16_byte_alignment(skew):
    real = torch.empty(64)[skew:skew + 40].view(2, 20)
    gen = torch.Generator().manual_seed(0)
    made, nan = aligned_random((3, 7), real, gen), aligned_nan((3, 7), real)
    assert made.data_ptr() % 16 == real.data_ptr() % 16 == nan.data_ptr() % 16
    assert made.shape == nan.shape == (3, 7) and made.abs().max() <= 1 and made.std() > 0.3
    assert torch.isnan(nan).all()


def test_check_inputs_are_the_real_calls_shapes_and_alignment_with_another_batch():
    x, w, b = (torch.empty(200)[k:k + n] for k, n in ((1, 2 * 3 * 4 * 5), (2, 6 * 3 * 2 * 2), (0, 6)))
    x, w = x.view(2, 3, 4, 5), w.view(6, 3, 2, 2)
    out = torch.empty(160)[3:3 + 2 * 6 * 3 * 4].view(2, 6, 3, 4)
    xs, ws, bs, outs = check_inputs(1, x, w, b, out)
    assert (xs.shape, ws.shape, bs.shape, outs.shape) == ((1, 3, 4, 5), w.shape, b.shape, (1, 6, 3, 4))
    assert [t.data_ptr() % 16 for t in (xs, ws, bs, outs)] == [t.data_ptr() % 16 for t in (x, w, b, out)]
    assert torch.isnan(outs).all() and check_inputs(1, x, w, None, out)[2] is None


@pytest.mark.parametrize("variant", ["implicit_gemm", "seed"])
def test_the_interpreter_compiles_nothing_and_says_so(variant):
    x, w, b = _case()
    launched = get_variant(variant).launch(x, w, b, 1, 1, 1, Meta(16, 16, 16, 2, 1), "ieee")
    assert launched.llvm_opt == "none" and llvm_opt.chosen_levels() == {}
    torch.testing.assert_close(launched.out, F.conv2d(x, w, b, 1, 1), rtol=1e-5, atol=1e-5)
