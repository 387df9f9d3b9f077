"""The kernel library: the registry of kernel variants (kernels/variants/), the machinery they plug into, and the
library's default variant for a call.

Imports torch and triton only. Importing this package compiles nothing, but `@triton.jit` decides at import
time whether kernels run compiled or through the interpreter: set TRITON_INTERPRET=1 before importing it.
"""

from __future__ import annotations

import importlib
import pkgutil
from typing import Any

from convtune.errors import ConfigError
from convtune.kernels import interpreter, llvm_opt
from convtune.kernels.base import REGISTRY, KernelVariant
from convtune.kernels.host import Host
from convtune.kernels.meta import Meta, validate_meta, validate_precision
from convtune.kernels.runner import Launched


llvm_opt.install()  # our kernels compile at llvm_opt's level (a workaround for an LLVM miscompile)
interpreter.install()  # under TRITON_INTERPRET=1: without the overflow checks whose verdict is discarded

# Every module of kernels/variants/ declares its variants as it is imported (kernels.base.register); `*_kernel.py`
# holds jit code a variant imports on its first launch (a Gluon kernel), and is left alone here.
from convtune.kernels import variants as _variants  # noqa: E402

for _module in sorted(m.name for m in pkgutil.iter_modules(_variants.__path__)):
    if not _module.endswith("_kernel"):
        importlib.import_module(f"{_variants.__name__}.{_module}")

VARIANTS: dict[str, KernelVariant] = dict(sorted(REGISTRY.items()))
# The variants that take any convolution and run under the interpreter: what a check over random shapes can run
# (on a GPU, those its compute capability allows: KernelVariant.runs_on)
GENERAL = tuple(sorted(name for name, v in VARIANTS.items()
                       if v.restricted_to is None and v.precisions is None and v.interpreted))
LIBRARY_KERNELS = tuple(name for name, v in VARIANTS.items() if v.library is not None)  # what a pin may name
LIBRARY = "library"  # `kernel=library`: the variant the library runs for the problem


def library_variant(layout: str, in_channels: int) -> str:
    """The kernel variant the library runs, where no pin has decided otherwise, for a call in `layout` ("nchw" or
    "channels_last", the output's) whose input has `in_channels` channels: of the variants that serve it
    (KernelVariant.serves), the one of highest rank. Its pins section holds the call's pins (library/dispatch.py)."""
    serving = [v for v in VARIANTS.values() if v.serves is not None and v.serves(layout, in_channels)]
    if not serving:
        raise ConfigError("layout", layout, "a call some kernel variant serves (none declares `serves` for it)")
    return max(serving, key=lambda v: (v.rank, v.name)).name


def get_variant(name: str) -> KernelVariant:
    try:
        return VARIANTS[name]
    except KeyError:
        raise ConfigError("kernel.name", name, f"one of {sorted(VARIANTS) + [LIBRARY]} ({LIBRARY}: the variant the "
                          "library runs for the problem)") from None


def variant_for(name: str, problem: Any) -> KernelVariant:
    """The variant whose pins section `kernel.name` names for `problem` (a ConvProblem): LIBRARY resolves by
    library_variant (what a pin there says runs is library/dispatch.py's decision)."""
    return get_variant(library_variant(problem.layout, problem.in_channels) if name == LIBRARY else name)


def default_meta(variant: KernelVariant, problem: Any, precision: str) -> Meta:
    """`variant`'s default configuration for `problem`'s class."""
    return variant.default_meta(problem.out_channels, problem.stride[1], problem.width, precision)


__all__ = ["GENERAL", "LIBRARY", "LIBRARY_KERNELS", "KernelVariant", "Launched", "Host", "Meta", "VARIANTS",
           "default_meta", "get_variant", "library_variant", "validate_meta", "validate_precision", "variant_for"]
