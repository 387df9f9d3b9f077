"""The kernel interface and its registry: each kernel variant declares itself, in its own module, once.

A variant's module ends with `register(KernelVariant(...))`. Importing the package `convtune.kernels` imports every
module of it (but those named `*_kernel.py`, which hold jit code a variant imports on its first launch), so the
registry holds every variant; everything that needs "all kernels" (the library call, verify, export, pins, the
contest, the tests) reads `REGISTRY` instead of a list of its own. Imports torch only (through common).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Optional

from convtune.kernels.common import Launched, Meta


@dataclass(frozen=True)
class LibraryCall:
    """How the library (convtune.conv2d) runs a variant once a pin names it: `plan(x, geometry, has_bias, meta,
    precision, out_channels_last)` makes the launch plan on the call's first signature (raising UnsupportedProblem
    for a call it refuses); later calls give `kernel_input(x, plan)` (the input as the kernel reads it: a copy into
    its layout, rounded, or as it is) and an output to `run(plan, x, weight, bias, out)`."""

    plan: Callable[..., Any]
    kernel_input: Callable[[Any, Any], Any]
    run: Callable[..., Any]


@dataclass(frozen=True)
class KernelVariant:
    """One kernel algorithm: how to launch it, its default configuration, its identity, and what it runs on."""

    name: str
    launch: Callable[..., Launched]
    default_meta: Callable[..., Meta]  # (out_channels, stride_w, width, precision) → the class default
    source_hash: str  # its identity (kernels/identity.py): its jit code, compile options and version
    tf32_ties: str  # how `tf32` breaks rounding ties ("away" or "even": kernels/precision.py)
    # launch's arguments → a call that launches with everything checked and planned once, as the library's call
    # does after a signature's first (convtune.library.functional); None where the library does not run the variant
    prepared: Optional[Callable[..., Callable[[], Any]]] = None
    # None: runs on any device (the Triton interpreter too) and any convolution the common checks allow; else what the
    # variant is restricted to, in words (its launch refuses the rest with UnsupportedProblem)
    restricted_to: Optional[str] = None
    # the precisions it runs (None: every one, precision.PRECISIONS), and the CUDA compute capability it needs (None: any
    # device, the interpreter too)
    precisions: Optional[tuple[str, ...]] = None
    compute_capability: Optional[tuple[int, int]] = None
    # what runs of this same kernel recorded as its source hash before its identity became its jit code (issue 43):
    # resume and promote take those runs as this kernel's
    previous_hashes: tuple[str, ...] = ()
    # how the library runs it (None: a pin may not name it; only its own runs measure it)
    library: Optional[LibraryCall] = None
    # reads an input in any memory layout (the layout copy, where it needs one, inside its call), and takes dilation
    # other than 1: what verify draws for it
    any_layout: bool = True
    dilation_one: bool = False
    # verify's case draw for a variant restricted to a family of shapes: (rng, index, variant, precision, small) →
    # a case; None: the general draw
    draw_case: Optional[Callable[..., Any]] = None
    # the names of its jit entry points (the kernels it launches): what llvm_opt's one-time check covers
    entry_points: tuple[str, ...] = ()
    # KernelBench's one-file export at a pinned configuration: (problem, meta dict, precision, provenance) → the
    # file's text (kernels/export_format.py); None: not exportable
    export: Optional[Callable[[Any, dict, str, str], str]] = None
    # why it cannot run a problem at a configuration, in one line, or None: (problem, meta, precision) → reason
    refuses: Optional[Callable[[Any, Meta, str], Optional[str]]] = None

    def runs_precision(self, precision: str) -> bool:
        return self.precisions is None or precision in self.precisions

    def runs_on(self, capability: Optional[tuple[int, int]]) -> bool:
        """Whether it runs on a device of that compute capability (None: the Triton interpreter)."""
        return self.compute_capability is None or self.compute_capability == capability


def without_input(make_plan: Callable[..., Any]) -> Callable[..., Any]:
    """A LibraryCall.plan for a kernel whose plan needs no look at the input: make_plan(geometry, has_bias, meta,
    precision, out_channels_last)."""
    return lambda x, g, has_bias, meta, precision, out_cl: make_plan(g, has_bias, meta, precision, out_cl)


def plan_refuses(make_plan: Callable[..., Any]) -> Callable[[Any, Meta, str], Optional[str]]:
    """A KernelVariant.refuses from a kernel's make_plan(geometry, has_bias, meta, precision): its one-line refusal
    for a problem (a convtune.problem.ConvProblem), worked out on meta-device tensors (nothing is allocated)."""
    def refuses(p: Any, meta: Meta, precision: str) -> Optional[str]:
        import torch

        from convtune.errors import ConfigError, UnsupportedProblem
        from convtune.kernels.common import geometry

        x = torch.empty(p.batch, p.in_channels, p.height, p.width, device="meta")
        w = torch.empty(p.out_channels, p.in_channels, p.kernel_h, p.kernel_w, device="meta")
        try:
            make_plan(geometry(x, w, tuple(p.stride), tuple(p.padding), tuple(p.dilation)), p.bias, meta, precision)
        except (UnsupportedProblem, ConfigError) as e:
            return str(e)
        return None
    return refuses


REGISTRY: dict[str, KernelVariant] = {}


def register(variant: KernelVariant) -> KernelVariant:
    """Declare a variant (once, in its own module). Two variants of one name are a programming error."""
    if variant.name in REGISTRY and REGISTRY[variant.name] is not variant:
        raise ValueError(f"kernel variant {variant.name!r} is registered twice")
    REGISTRY[variant.name] = variant
    return variant
