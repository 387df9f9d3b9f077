"""Paired A/B timing of whole-model steps: configurations take turns step by step, so drift (clocks, temperature,
other load) falls on all of them alike and cancels out of the per-turn ratios; the median ratio comes with a
bootstrap interval. Used by tune_model.py's end-to-end check and benchmarks/train_step_ab.py; promote's contest
(measure/contest.py) takes its orders.

A ResNet-50 train step at batch 32 on the H200 is bound by the host, and round medians scattered by 2-4 %
(benchmarks/train_step_ab.py); the 95 % interval of 150 interleaved turns was 0.5 % wide there (0.9952-1.0004,
tune_model.py measure_only=true; docs/PERFORMANCE.md).
"""

from __future__ import annotations

import random
import statistics
from collections.abc import Callable
from dataclasses import dataclass


def bootstrap_median(ratios: list[float], resamples: int = 2000, seed: int = 0) -> tuple[float, float]:
    """The 2.5 % and 97.5 % points of the median of `ratios` over resamples (with replacement)."""
    rng = random.Random(seed)
    n = len(ratios)
    meds = sorted(statistics.median(rng.choices(ratios, k=n)) for _ in range(resamples))
    return meds[int(0.025 * resamples)], meds[int(0.975 * resamples) - 1]


def balanced_orders(n: int) -> list[list[int]]:
    """Orders of n steps (a Williams design) in which each step runs right after each other step equally often: n
    orders for an even n, 2n for an odd one. A fixed cycle would put each step always after the same neighbour: on
    the H200, in an A/A test of one kernel against two copies of itself, the copy that always ran after cuDNN's
    42 ms measured 0.8-1.7 % slower than the others."""
    base = [0]
    for i in range(1, n):  # 0, 1, n - 1, 2, n - 2, ...
        base.append((i + 1) // 2 if i % 2 else n - i // 2)
    orders = [[(b + r) % n for b in base] for r in range(n)]
    return orders if n % 2 == 0 else orders + [o[::-1] for o in orders]


def take_turns(steps: dict[str, Callable[[], float]], turns: int, warmup: int) -> dict[str, list[float]]:
    """Each step function's seconds over `turns` turns; every turn runs each function once, in the orders of
    balanced_orders taken in turn, so that each runs equally often in each position and after each other step. Each
    function returns its own time, so that its set-up stays outside it."""
    if turns < 2:
        raise ValueError(f"turns={turns}: at least 2 (a bootstrap needs turns)")
    names = list(steps)
    for _ in range(warmup):
        for k in names:
            steps[k]()
    got: dict[str, list[float]] = {k: [] for k in names}
    orders = balanced_orders(len(names))
    for i in range(turns):
        for j in orders[i % len(orders)]:
            got[names[j]].append(steps[names[j]]())
    return got


@dataclass(frozen=True)
class Ratio:
    """The median per-turn time ratio of a configuration to a baseline, with its 95 % bootstrap interval."""
    median: float
    low: float
    high: float

    @property
    def faster(self) -> bool:
        """Faster than the baseline at 95 %: the interval lies below 1."""
        return self.high < 1.0

    def __str__(self) -> str:
        return f"{self.median:.4f} (95 % {self.low:.4f}-{self.high:.4f})"


def ratio(times: dict[str, list[float]], name: str, baseline: str) -> Ratio:
    """`name`'s time over `baseline`'s, turn by turn."""
    per_turn = [a / b for a, b in zip(times[name], times[baseline])]
    low, high = bootstrap_median(per_turn)
    return Ratio(statistics.median(per_turn), low, high)
