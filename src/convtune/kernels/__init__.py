"""The kernel library: jit kernels, their launchers and their default configurations.

Imports torch and triton only. Importing this package compiles nothing, but `@triton.jit` decides at import
time whether kernels run compiled or through the interpreter: set TRITON_INTERPRET=1 before importing it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from convtune.errors import ConfigError
from convtune.kernels import implicit_gemm, seed
from convtune.kernels.common import Launched, Meta, validate_meta, validate_precision


@dataclass(frozen=True)
class KernelVariant:
    """One kernel algorithm: how to launch it, its default configuration, and its source identity."""

    name: str
    launch: Callable[..., Launched]
    default_meta: Callable[..., Meta]  # (out_channels, stride_w, width, precision) → the class default
    source_hash: str
    description: str


VARIANTS: dict[str, KernelVariant] = {
    "seed": KernelVariant("seed", seed.launch, seed.default_meta, seed.SOURCE_HASH,
                          "implicit GEMM of the original brief (static_range K loop, runtime shapes)"),
    "implicit_gemm": KernelVariant("implicit_gemm", implicit_gemm.launch, implicit_gemm.default_meta,
                                   implicit_gemm.SOURCE_HASH,
                                   "implicit GEMM with constexpr shapes, pipelined K loop, per-image tiles"),
}


def get_variant(name: str) -> KernelVariant:
    try:
        return VARIANTS[name]
    except KeyError:
        raise ConfigError("kernel.name", name, f"one of {sorted(VARIANTS)}") from None


__all__ = ["KernelVariant", "Launched", "Meta", "VARIANTS", "get_variant", "validate_meta", "validate_precision"]
