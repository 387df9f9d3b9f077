"""The kernel library: jit kernels, their launchers and their default configurations.

Imports torch and triton only. Importing this package compiles nothing, but `@triton.jit` decides at import
time whether kernels run compiled or through the interpreter: set TRITON_INTERPRET=1 before importing it.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
import os
import pkgutil
from typing import Any, Optional

from convtune.errors import ConfigError
from convtune.kernels import llvm_opt, pins
from convtune.kernels.base import REGISTRY, KernelVariant
from convtune.kernels.host import Host
from convtune.kernels.common import Launched, Meta, validate_meta, validate_precision


llvm_opt.install()  # our kernels compile at llvm_opt's level (a workaround for an LLVM miscompile)

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


def configured(variant: KernelVariant, pins_file: pins.Source, gpu: str, problem: Any, precision: str,
               training: bool = False) -> tuple[pins.Pinned, str]:
    """What `variant`'s pins say for a call: the pin for (gpu, variant, problem, precision), else the nearest
    pinned shape of the same geometry, else the variant's default for the problem's class. A pin may say
    pins.TORCH (torch's convolution won the contest for that key) or name another kernel (a pins.KernelPin: that
    kernel won it). `training` (a call that records gradients): a "+train" pin for the shape, exact or nearest,
    comes first. `problem` is a convtune.problem.ConvProblem (key(), out_channels, stride, width). Returns (Meta,
    KernelPin or pins.TORCH, source). `pins_file`: a file, or files read as layers (pins.load_layers)."""
    data = pins.load_layers(pins_file)
    found = None
    if training:
        found = pins.find(data, gpu, variant.name, pins.pin_key(problem.key(), precision, training=True))
    value, source = found or pins.lookup(data, gpu, variant.name, pins.pin_key(problem.key(), precision),
                                         lambda: _default(variant, problem, precision))
    return value, source


def configured_meta(variant: KernelVariant, pins_file: pins.Source, gpu: str, problem: Any,
                    precision: str) -> tuple[Meta, str]:
    """The kernel configuration a run of `variant` measures: as `configured`, but where the pin says torch or
    another kernel, the variant's default (a run measures this kernel; the source says what the library runs)."""
    value, source = configured(variant, pins_file, gpu, problem, precision)
    if isinstance(value, Meta):
        return value, source
    return _default(variant, problem, precision), f"{variant.name} default ({source} runs {pins.describe(value)})"


# What the library runs for a call no pin of this GPU decides: "torch" (the default: the library runs a kernel only
# where a measurement on this GPU showed it faster and judge-correct, issue 44), or "kernel" (the rule's kernel at
# the nearest pinned shape of the same geometry, else its default: what the library did before issue 44, for
# experiments and for tests of the kernels through the library). Read on every first call of a signature.
UNPINNED_ENV = "CONVTUNE_UNPINNED"
UNPINNED = ("torch", "kernel")


def unpinned_policy() -> str:
    value = os.environ.get(UNPINNED_ENV, "torch") or "torch"
    if value not in UNPINNED:
        raise ConfigError(UNPINNED_ENV, value, f"one of {list(UNPINNED)} (torch: unpinned calls run torch)")
    return value


@dataclass(frozen=True)
class Choice:
    """What the pins say the library runs for a call, and which rule said it: "pin" (this GPU's exact pin), "family"
    (a pin of a GPU of its family, `family_gpu`: the library runs it only once verified on this GPU), "torch" (no pin:
    torch runs), or "kernel" (CONVTUNE_UNPINNED=kernel: the rule's kernel, nearest pin or default). `key`: the pin
    key that decided (or the plain key where none did); `section`: the variant whose section holds it."""

    value: pins.Pinned
    source: str
    rule: str
    key: str
    section: str
    family_gpu: Optional[str] = None


def choose(pins_file: pins.Source, gpu: str, problem: Any, precision: str, training: bool = False,
           capability: Optional[tuple[int, int]] = None) -> Choice:
    """What the pins file says the library runs for a call of `problem` on `gpu` (its layout and channels pick the
    section, library_variant): this GPU's exact pin for the key (for a call that records gradients its "+train" pin
    first); else a family GPU's pin for it (pins.family_sources, by `capability`); else torch, unless
    CONVTUNE_UNPINNED=kernel (unpinned_policy)."""
    home = get_variant(library_variant(problem.layout, problem.in_channels))
    keys = ([pins.pin_key(problem.key(), precision, training=True)] if training else []) + \
        [pins.pin_key(problem.key(), precision)]
    if unpinned_policy() == "kernel":
        value, source = configured(home, pins_file, gpu, problem, precision, training)
        return Choice(pins.KernelPin(home.name, value) if isinstance(value, Meta) else value, source, "kernel",
                      keys[-1], home.name)
    data = pins.load_layers(pins_file)
    for source_gpu in [gpu] + pins.family_sources(data, gpu, capability):
        section = pins.entries(data, source_gpu, home.name)
        key = next((k for k in keys if k in section), None)
        if key is None:
            continue
        value = pins.pinned(section[key])
        value = pins.KernelPin(home.name, value) if isinstance(value, Meta) else value
        if source_gpu == gpu:
            return Choice(value, f"pin {gpu} / {home.name} / {key}", "pin", key, home.name)
        if isinstance(value, pins.KernelPin) and not get_variant(value.kernel).runs_on(capability):
            continue  # a family GPU's kernel that this one cannot run (its compute capability): never chosen
        cc = "" if capability is None else f", compute capability {capability[0]}.{capability[1]} as {gpu}"
        return Choice(value, f"family pin {source_gpu} / {home.name} / {key}{cc}", "family", key, home.name,
                      source_gpu)
    return Choice(pins.TORCH, f"no pin for {keys[-1]} on {gpu}" + (" or its family" if capability else "") +
                  ": the library runs a kernel only where a measurement on this GPU (or its family) pinned it",
                  "torch", keys[-1], home.name)


def library_choice(pins_file: pins.Source, gpu: str, problem: Any, precision: str,
                   training: bool = False, capability: Optional[tuple[int, int]] = None) -> tuple[pins.Pinned, str]:
    """choose's (value, source): what the tracker's `kernel=library` measures for the key, a family pin included
    (a run of it on this GPU is the tracker's measurement of it)."""
    c = choose(pins_file, gpu, problem, precision, training, capability)
    return c.value, c.source


def _default(variant: KernelVariant, problem: Any, precision: str) -> Meta:
    return variant.default_meta(problem.out_channels, problem.stride[1], problem.width, precision)


LIBRARY = "library"  # `kernel=library`: the variant the library runs for the problem


def library_variant(layout: str, in_channels: int) -> str:
    """The kernel variant the library runs, where no pin has decided otherwise, for a call in `layout` ("nchw" or
    "channels_last", the output's) whose input has `in_channels` channels: of the variants that serve it
    (KernelVariant.serves), the one of highest rank; its pins section holds the call's pins (library_choice)."""
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
    library_variant (what a pin there says runs is library_choice's answer)."""
    return get_variant(library_variant(problem.layout, problem.in_channels) if name == LIBRARY else name)


__all__ = ["GENERAL", "LIBRARY", "LIBRARY_KERNELS", "KernelVariant", "Launched", "Host", "Meta", "VARIANTS", "configured",
           "configured_meta", "get_variant", "library_choice", "Choice", "choose", "library_variant", "validate_meta",
           "validate_precision", "variant_for"]
