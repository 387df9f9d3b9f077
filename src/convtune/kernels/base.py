"""The kernel interface and its registry: each kernel variant declares itself, in its own module, once.

A variant's module ends with `register(KernelVariant(...))`. Importing the package `convtune.kernels` imports every
module of it (but those named `*_kernel.py`, which hold jit code a variant imports on its first launch), so the
registry holds every variant; everything that needs "all kernels" (the library call, verify, export, pins, the
contest, the tests) reads `REGISTRY` instead of a list of its own. Imports torch only (through runner).
"""

from __future__ import annotations

import math
import random
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Optional

from convtune.kernels import llvm_opt
from convtune.kernels.identity import KernelSource
from convtune.kernels.meta import Meta
from convtune.kernels.runner import Launched
from convtune.problem import EPILOGUE_OPS

if TYPE_CHECKING:
    from convtune.kernels.host import Host


def log_uniform_int(rng: random.Random, lo: int, hi: int) -> int:
    """An integer in [lo, hi], log-uniform: small sizes as often as large ones (the correctness cases' draws)."""
    return int(round(math.exp(rng.uniform(math.log(lo), math.log(hi)))))


@dataclass(frozen=True)
class Knob:
    """One launch parameter a variant restricts: the Meta field that carries it (`key`: how runs, pins and Hydra
    spell it), the values it takes, its own name where the variant's design means something else by it (a kernel whose
    MMA warpgroups ride in num_stages), and why those values."""

    key: str
    values: tuple[int, ...]
    why: str
    name: str = ""


@dataclass(frozen=True)
class Space:
    """A variant's configuration space: the knobs it restricts (the rest take what kernels.meta.validate_meta
    allows). Its validation, its names in messages, and micro-tuning's neighbours all come from here."""

    variant: str
    knobs: tuple[Knob, ...]

    def knob(self, key: str) -> Optional[Knob]:
        return next((k for k in self.knobs if k.key == key), None)

    def refusal(self, meta: Meta) -> Optional[tuple[str, Any, str]]:
        """(key, value, what it takes) for the first knob `meta` is outside of, or None."""
        for k in self.knobs:
            value = getattr(meta, k.key)
            if value not in k.values:
                what = f"{k.values[0]}" if len(k.values) == 1 else f"one of {list(k.values)}"
                own = f"{k.name}: " if k.name and k.name != k.key else ""
                return k.key, value, f"{what} for {self.variant} ({own}{k.why})"
        return None

    def check(self, meta: Meta) -> None:
        """ConfigError naming the first knob `meta` is outside of, by its own name too."""
        refused = self.refusal(meta)
        if refused is not None:
            from convtune.errors import ConfigError

            raise ConfigError(*refused)

    def allows(self, meta: Meta) -> bool:
        return self.refusal(meta) is None

    def neighbours(self, key: str, value: int, default: tuple[int, ...]) -> tuple[int, ...]:
        """The values next to `value` along `key`: in the knob's values where the variant restricts it, else in
        `default` (the caller's range)."""
        knob = self.knob(key)
        values = knob.values if knob is not None else default
        if value not in values:
            return tuple(v for v in (value - 1, value + 1) if v in values)
        i = values.index(value)
        return tuple(values[j] for j in (i - 1, i + 1) if 0 <= j < len(values))


DTYPES = ("float32", "bfloat16", "float16")  # what a variant may take (KernelVariant.dtypes)
TF32_TIE_RULES = ("away", "even")  # how `tf32` breaks rounding ties (kernels/precision.py)


@dataclass(frozen=True, kw_only=True)
class KernelVariant:
    """One kernel algorithm, declared once in its own module with keywords, checked as it is made (a ValueError in
    one line naming the variant and the field): everything code or tests look up about a variant is here."""

    name: str  # lowercase letters, digits and "_"
    launch: Callable[..., Launched]  # checks, plans, allocates and launches: what the tracker times
    default_meta: Callable[..., Meta]  # (out_channels, stride_w, width, precision) → the class default
    source: KernelSource  # what its identity is made of (kernels/identity.py): jit code, compile options, version
    tf32_ties: str  # how `tf32` breaks rounding ties: "away" or "even" (kernels/precision.py)
    # the jit entry points it launches: what llvm_opt's one-time check covers
    entry_points: tuple[str, ...]
    # launch's arguments → a call that launches with everything checked and planned once, as the library's call does
    # after a signature's first (convtune.library.functional); None where the library does not run the variant
    prepared: Optional[Callable[..., Callable[[], Any]]] = None
    # how the library runs it (kernels/host.py; None: a pin may not name it, only its own runs measure it)
    library: Optional[Host] = None
    # which calls it takes by default where no pin decides: (call layout "nchw" or "channels_last", input channels) →
    # bool; among the variants that take a call, the highest `rank` is the library's default (None: only a pin or a
    # contest runs it)
    serves: Optional[Callable[[str, int], bool]] = None
    rank: int = 0
    # the bound launch of a signature whose plan allows one: (plan, x, weight, bias) → a call (x, weight, bias) →
    # output that skips Triton's per-call dispatch, or None (functional.Bound keeps it for a layer)
    bind: Optional[Callable[..., Optional[Callable[..., Any]]]] = None
    # None: runs any convolution the common checks allow; else what it is restricted to, in words (its launch refuses
    # the rest with UnsupportedProblem), and then `draw_case` is required
    restricted_to: Optional[str] = None
    # verify's case draw for a restricted variant: (rng, small) → a case's fields in its family (shape, stride,
    # padding, ...: commands/verify_cases.Case); None: the general draw
    draw_case: Optional[Callable[..., dict]] = None
    # the precisions it runs (None: every one, precision.PRECISIONS), the dtypes it takes, the epilogue ops it fuses
    # after the convolution's own bias (which every variant adds)
    precisions: Optional[tuple[str, ...]] = None
    dtypes: Optional[tuple[str, ...]] = None  # None: its library Host's (float32 where it has none)
    epilogues: Optional[tuple[str, ...]] = None  # None: its library Host's (none where it has none)
    # the CUDA compute capability it needs on a GPU (None: any GPU); whether the interpreter runs it is `interpreted`
    compute_capability: Optional[tuple[int, int]] = None
    interpreted: bool = True  # whether the Triton interpreter runs it (tests on CPU): Gluon kernels it cannot
    # what runs of this same kernel recorded as its source hash under earlier identities: resume and promote take
    # those runs as this kernel's
    previous_hashes: tuple[str, ...] = ()
    # reads an input in any memory layout (the layout copy, where it needs one, inside its call), and takes dilation
    # other than 1: what verify draws for it
    any_layout: bool = True
    dilation_one: bool = False
    # KernelBench's one-file export at a pinned configuration: (problem, meta dict, precision, provenance) → the
    # file's text (kernels/export_format.py); None: not exportable
    export: Optional[Callable[[Any, dict, str, str], str]] = None
    # why it cannot run a problem at a configuration, in one line, or None: (problem, meta, precision) → reason
    refuses: Optional[Callable[[Any, Meta, str], Optional[str]]] = None
    # the launch parameters it restricts, with their own names (None: what kernels.meta.validate_meta allows)
    space: Optional[Space] = None

    def __post_init__(self) -> None:
        from convtune.kernels.precision import PRECISIONS

        def refuse(field: str, why: str) -> None:
            raise ValueError(f"kernel variant {self.name!r}: {field} {why}")
        if not re.fullmatch(r"[a-z][a-z0-9_]*", str(self.name)):
            refuse("name", "must be lowercase letters, digits and '_', starting with a letter")
        if self.tf32_ties not in TF32_TIE_RULES:
            refuse("tf32_ties", f"must be one of {list(TF32_TIE_RULES)}, not {self.tf32_ties!r}")
        if not self.entry_points:
            refuse("entry_points", "must name the jit kernels it launches (llvm_opt's one-time check covers them)")
        if self.dtypes is None:  # frozen: set once, as it is declared
            object.__setattr__(self, "dtypes", tuple(self.library.dtypes) if self.library is not None else ("float32",))
        if self.epilogues is None:
            object.__setattr__(self, "epilogues", tuple(self.library.epilogues) if self.library is not None else ())
        for field, values, allowed in (("precisions", self.precisions or (), PRECISIONS), ("dtypes", self.dtypes, DTYPES),
                                       ("epilogues", self.epilogues, EPILOGUE_OPS)):
            unknown = [v for v in values if v not in allowed]
            if unknown or (field == "dtypes" and not values):
                refuse(field, f"must be taken from {list(allowed)}" + (f", not {unknown}" if unknown else ""))
        if self.restricted_to is not None and self.draw_case is None:
            refuse("draw_case", f"is required: it is restricted to {self.restricted_to}, and verify draws its cases "
                                "from that family")
        if self.library is not None and (self.launch != self.library.launch or self.prepared != self.library.prepared):
            refuse("launch and prepared", "must be its library Host's (library.launch, library.prepared)")
        if self.library is not None and tuple(self.dtypes) != tuple(self.library.dtypes):
            refuse("dtypes", f"must be its library Host's ({list(self.library.dtypes)}): the Host's launch checks them")
        if self.library is not None and tuple(self.epilogues) != tuple(self.library.epilogues):
            refuse("epilogues", f"must be its library Host's ({list(self.library.epilogues)}): the Host's launch "
                                "checks them")
        for field in ("serves", "bind"):
            if getattr(self, field) is not None and self.library is None:
                refuse(field, "needs `library`: only a variant the library runs can serve a call or bind one")
        if isinstance(self.rank, bool) or not isinstance(self.rank, int):
            refuse("rank", f"must be an integer, not {self.rank!r}")
        if not isinstance(self.source, KernelSource):
            refuse("source", f"must be a KernelSource (kernels/identity.py), not {type(self.source).__name__}")
        if self.compute_capability is not None and not (
                isinstance(self.compute_capability, tuple) and len(self.compute_capability) == 2):
            refuse("compute_capability", f"must be (major, minor), not {self.compute_capability!r}")

    @property
    def source_hash(self) -> str:
        """Its identity, the hash of `source`: computed on its first use in a process."""
        return self.source.hash

    def takes_dtype(self, dtype: str) -> bool:
        return dtype in self.dtypes  # type: ignore[operator]

    def fuses(self, chain: tuple[str, ...]) -> bool:
        """Whether it fuses every op of an epilogue chain (the empty chain: every variant)."""
        return all(op in self.epilogues for op in chain)  # type: ignore[operator]

    def runs_precision(self, precision: str) -> bool:
        return self.precisions is None or precision in self.precisions

    def runs_on(self, capability: Optional[tuple[int, int]]) -> bool:
        """Whether it runs on a device of that compute capability (None: the Triton interpreter)."""
        if capability is None:
            return self.interpreted
        return self.compute_capability is None or self.compute_capability == capability


def plan_refuses(make_plan: Callable[..., Any]) -> Callable[[Any, Meta, str], Optional[str]]:
    """A KernelVariant.refuses from a kernel's make_plan(geometry, has_bias, meta, precision): its one-line refusal
    for a problem (a convtune.problem.ConvProblem), worked out on meta-device tensors (nothing is allocated)."""
    def refuses(p: Any, meta: Meta, precision: str) -> Optional[str]:
        import torch

        from convtune.errors import ConfigError, UnsupportedProblem
        from convtune.kernels.conv_args import geometry

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
    llvm_opt.declare(variant.entry_points)
    return variant
