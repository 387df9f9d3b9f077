"""A launch configuration (`Meta`: BLOCK_M/N/K, num_warps, num_stages), its validation, and the precisions.

Runs, pins and Hydra spell a configuration with Meta's five keys, so every variant's records stay comparable.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any, Optional

from convtune.errors import ConfigError
from convtune.kernels.precision import PRECISIONS

NUM_WARPS_ALLOWED = (1, 2, 4, 8, 16, 32)
# tl.dot needs every tile dimension >= 16; above these bounds register or shared-memory use explodes.
BLOCK_BOUNDS = {"BLOCK_M": (16, 256), "BLOCK_N": (16, 256), "BLOCK_K": (16, 128)}


@dataclass(frozen=True)
class Meta:
    """One launch configuration, spelled as Triton spells it."""

    BLOCK_M: int
    BLOCK_N: int
    BLOCK_K: int
    num_warps: int
    num_stages: int

    def as_dict(self) -> dict[str, int]:
        return asdict(self)

    def label(self) -> str:
        return " ".join(f"{k}={v}" for k, v in self.as_dict().items())

    def short(self) -> str:
        return f"M{self.BLOCK_M}-N{self.BLOCK_N}-K{self.BLOCK_K}-w{self.num_warps}-s{self.num_stages}"

    @staticmethod
    def keys() -> tuple[str, ...]:
        return tuple(f.name for f in fields(Meta))

    @staticmethod
    def fill(given: dict[str, Optional[int]], default: "Meta") -> "Meta":
        """The given values where set (not None), the default's elsewhere."""
        return Meta(**{k: (given.get(k) if given.get(k) is not None else getattr(default, k)) for k in Meta.keys()})


def _is_power_of_two(v: int) -> bool:
    return v > 0 and (v & (v - 1)) == 0


def _is_int(v: Any) -> bool:
    """An int that is not a bool: `True` is an int in Python, and `num_stages: true` was once taken as 1."""
    return isinstance(v, int) and not isinstance(v, bool)


def validate_meta(meta: Meta) -> None:
    """Raise ConfigError naming the first meta-parameter that is not allowed."""
    for key, (lo, hi) in BLOCK_BOUNDS.items():
        v = getattr(meta, key)
        if not _is_int(v) or not _is_power_of_two(v) or not lo <= v <= hi:
            raise ConfigError(key, v, f"a power of two from {lo} to {hi} (tl.dot needs >= 16)")
    if not _is_int(meta.num_warps) or meta.num_warps not in NUM_WARPS_ALLOWED:
        raise ConfigError("num_warps", meta.num_warps, f"one of {list(NUM_WARPS_ALLOWED)}")
    if not _is_int(meta.num_stages) or meta.num_stages < 1:
        raise ConfigError("num_stages", meta.num_stages, "an integer >= 1")


def validate_precision(precision: str) -> None:
    if precision not in PRECISIONS:
        raise ConfigError("precision", precision, f"one of {list(PRECISIONS)}")



def safe_stages(num_stages: int, k_steps: int) -> int:
    """The pipeline depth to compile a K loop of `k_steps` iterations (a constexpr trip count) at: `num_stages`, or
    `k_steps` where the loop runs from 2 to num_stages - 1 times (num_stages >= 3). Why: on the H200 (Triton 3.6.0),
    the NHWC implicit GEMM with A rounded in the kernel and 256-wide N tiles gave wrong sums, different from launch to
    launch, on such short loops: 2 steps at 3 stages and 3 at 4 (relative errors 1e-2 to 1.4e-1, at O0 too, so not
    LLVM; 4 of the 5 such binaries of a map of 1 to 108 steps at 2 to 4 stages; 128-wide tiles 0 of 6), and 2 steps
    at 4 stages (5.8e-3 at M128-N256-K32-w8-s4 over 48 channels, 1 of 196 cases of tests/gpu_scripts/nhwc_short_k.py,
    which checks the rule). A loop that short has every load in flight at a depth of its own length as well; a
    1-step loop and every longer one compile as asked (right in every case of that map)."""
    return k_steps if num_stages >= 3 and 2 <= k_steps < num_stages else num_stages
