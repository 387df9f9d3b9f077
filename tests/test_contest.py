"""Promote's decision (measure/contest.decide), every branch, on contenders as a contest leaves them."""

import pytest

from convtune.kernels import Meta
from convtune.pins import TORCH
from convtune.measure.contest import Contender, bootstrap_ratio, decide

PIN, A, B = Meta(128, 128, 16, 4, 6), Meta(64, 128, 32, 4, 3), Meta(128, 64, 32, 8, 3)


def c(meta, role, rounds=(), logged=None, correct=True, idle=()):
    return Contender(meta, role, run_id=None, logged_ms=logged, correct=correct, rounds_ms=list(rounds),
                     idle_ms=list(idle))


def test_nobody_correct_means_no_decision():
    d = decide([c(PIN, "pin", [1.0, 1.0], correct=False), c(A, "candidate", [0.5, 0.5], correct=False)], 0.02, 0.95)
    assert not d.promote and d.winner is None and d.reason == "no correct contender could be timed"


def test_the_pin_stays_when_it_is_the_fastest():
    d = decide([c(PIN, "pin", [1.0, 1.0, 1.0]), c(A, "candidate", [1.2, 1.1, 1.3])], 0.02, 0.95)
    assert not d.promote and d.winner.meta == PIN and d.reason == "the current pin is the fastest contender"


def test_a_pin_that_is_no_longer_correct_is_replaced_whatever_the_gain():
    d = decide([c(PIN, "pin", correct=False, logged=0.1), c(A, "candidate", [1.0, 1.0])], 0.02, 0.95)
    assert d.promote and d.winner.meta == A and d.reason == "the current pin fails the correctness check"


def test_a_default_without_measurement_cannot_be_beaten_by_logged_numbers_alone():
    d = decide([c(PIN, "default", correct=None), c(A, "candidate", logged=0.5, correct=None)], 0.02, 0.95)
    assert not d.promote and d.winner is None
    assert d.reason == "the current default has no measurement: re-measure on its GPU"


def test_a_gain_under_min_gain_keeps_the_pin():
    d = decide([c(PIN, "pin", [1.01] * 5), c(A, "candidate", [1.0] * 5)], 0.02, 0.95)
    assert not d.promote and d.gain == pytest.approx(0.01) and d.reason == "gain 1.0 % < 2 %"


def test_a_gain_whose_lower_bound_misses_min_gain_is_unstable():
    # median ratio 1.10, but two of five rounds show no gain: the 95 % lower bound falls under 1.02
    d = decide([c(PIN, "pin", [1.1, 1.1, 1.1, 1.0, 1.0]), c(A, "candidate", [1.0] * 5)], 0.02, 0.95)
    assert not d.promote and d.reason.startswith("unstable: the 95 % lower bound of the speed ratio, 1.000")


def test_a_clear_and_stable_gain_is_promoted():
    d = decide([c(PIN, "pin", [1.2, 1.21, 1.19, 1.2]), c(A, "candidate", [1.0] * 4), c(B, "candidate", [1.1] * 4)],
               0.02, 0.95)
    assert d.promote and d.winner.meta == A and d.gain == pytest.approx(0.2)
    assert d.ratio_lo >= 1.19 and d.reason.startswith("gain 20.0 % >= 2 % (lower bound 1.19")


def test_logged_numbers_alone_decide_by_the_point_estimate():
    d = decide([c(PIN, "pin", logged=1.0, correct=None), c(A, "candidate", logged=0.8, correct=None)], 0.02, 0.95)
    assert d.promote and d.gain == pytest.approx(0.25) and d.ratio_lo == d.ratio_hi == pytest.approx(1.25)


def test_bootstrap_bounds_bracket_the_median_ratio():
    med, lo, hi = bootstrap_ratio([1.1, 1.2, 1.0, 1.3, 1.15], [1.0] * 5, 0.9)
    assert lo <= med <= hi and med == pytest.approx(1.15) and lo >= 1.0 and hi <= 1.3


FAST_GPU = [0.17, 0.17, 0.18, 0.17]  # our stem on GPU time (H200, batch 32) ...
SLOW_GPU = [0.32, 0.31, 0.32, 0.32]  # ... and cuDNN's


def test_torch_takes_the_key_where_the_kernel_wins_on_gpu_time_but_loses_once_the_host_is_counted():
    d = decide([c(PIN, "default", FAST_GPU, idle=[0.40] * 4), c(TORCH, "torch", SLOW_GPU, idle=[0.34] * 4)], 0.02, 0.95)
    assert d.promote and d.winner.meta == TORCH and d.reason.startswith("torch is 17.6 % faster from an idle GPU")
    assert "on GPU time alone: the current default is the fastest contender" in d.reason


def test_the_kernel_keeps_the_key_where_it_wins_both_ways_or_torch_is_not_min_gain_faster_from_idle():
    for idle in ([0.30] * 4, [0.345] * 4):  # faster from idle too; or slower by 1.5 % < min_gain
        d = decide([c(PIN, "default", FAST_GPU, idle=idle), c(TORCH, "torch", SLOW_GPU, idle=[0.34] * 4)], 0.02, 0.95)
        assert not d.promote and d.winner.meta == PIN, d.reason


def test_a_kernel_replaces_a_torch_pin_only_if_it_also_wins_from_an_idle_gpu():
    pinned = c(TORCH, "pin", SLOW_GPU, idle=[0.34] * 4)
    d = decide([pinned, c(A, "candidate", FAST_GPU, idle=[0.337] * 4)], 0.02, 0.95)  # 0.9 % faster from idle
    assert not d.promote and d.winner is pinned and d.reason.startswith("torch stays (the pin): the kernel is not 2 %")
    d = decide([c(TORCH, "pin", SLOW_GPU, idle=[0.34] * 4), c(A, "candidate", FAST_GPU, idle=[0.30] * 4)], 0.02, 0.95)
    assert d.promote and d.winner.meta == A


def test_a_kernel_that_wins_torchs_key_on_gpu_time_alone_makes_way_for_the_next_fastest():
    """Kernels of near-equal GPU time differ in host cost: the fastest losing from an idle GPU must not hand the key
    back to torch while the next fastest wins it both ways."""
    slow_host = c(A, "candidate", [0.17] * 4, idle=[0.345] * 4)  # the fastest on GPU time, 1.5 % from idle
    d = decide([c(TORCH, "unpinned", SLOW_GPU, idle=[0.34] * 4), slow_host,
                c(B, "candidate", [0.18] * 4, idle=[0.29] * 4)], 0.02, 0.95)
    assert d.promote and d.winner.meta == B, d.reason
    assert d.reason.endswith(f"({slow_host.label}: faster on GPU time, not from an idle GPU)")
    # where none wins from an idle GPU, torch stays, and the reason is the fastest kernel's
    d = decide([c(TORCH, "unpinned", SLOW_GPU, idle=[0.34] * 4), slow_host,
                c(B, "candidate", [0.18] * 4, idle=[0.36] * 4)], 0.02, 0.95)
    assert not d.promote and d.winner.meta == TORCH
    assert d.reason == ("torch stays (no pin): the kernel is not 2 % faster from an idle GPU (host cost counted): "
                        f"torch 0.3400 ms, {slow_host.label} 0.3450 ms")


def test_without_idle_timings_only_gpu_time_decides():  # the interpreter, or logged numbers
    d = decide([c(PIN, "default", FAST_GPU), c(TORCH, "torch", SLOW_GPU)], 0.02, 0.95)
    assert not d.promote and d.winner.meta == PIN


def test_the_contest_orders_put_each_contender_after_each_other_alike():
    from collections import Counter

    from convtune.measure.ab import balanced_orders

    for n in range(1, 8):
        orders = balanced_orders(n)
        assert len(orders) == (n if n % 2 == 0 else 2 * n)
        assert all(sorted(o) == list(range(n)) for o in orders)  # each contender once a round
        after = Counter((o[i], o[i + 1]) for o in orders for i in range(n - 1))
        per_pair = 1 if n % 2 == 0 else 2
        assert after == {(a, b): per_pair for a in range(n) for b in range(n) if a != b}
        assert Counter((o[i], i) for o in orders for i in range(n)) == {(a, i): per_pair for a in range(n)
                                                                         for i in range(n)}
