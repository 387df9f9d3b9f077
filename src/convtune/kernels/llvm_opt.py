"""Every compiled binary of our kernels is checked once, and recompiled without LLVM's optimiser if wrong.

Why: on an H200 (triton 3.6.0), 31 of ~3,000 random shapes came out wrong on the GPU while the interpreter
computed them right (relative errors 0.06-1.4, both kernels, every precision, mostly where the input gather
crosses the padding). compute-sanitizer's racecheck and memcheck found nothing. With LLVM's module optimisation
skipped (O0) all 31 came out right; at O1 30; at O2 and O3 (Triton's level) none; with ptxas at -O0 instead,
29. So the wrong code comes from LLVM's middle end.
O0 for every kernel would cost 4-19 % (L1 #50 0.561 vs 0.520 ms, alexnet_conv3 0.967 vs 0.813 ms), and
no single source change was found that avoids the miscompile. Our kernels take the whole problem shape as
constexprs (the seed kernel: its runtime sizes are checked with the same specialisation), so a binary is
either right for every input of its shape or wrong in its index logic: one small check on random data tells.

So, in "auto" mode (the default), the first launch of a new binary runs it once on a small random input
(batch 1, the same alignment as the real call) against a float64 torch reference. Right: it is used from then
on. Wrong: the kernel is compiled again with LLVM's module optimisation skipped (O0), checked again, and used.
Wrong at O0 too: KernelMiscompiled, never a wrong answer. The level chosen is kept per binary for the process,
and returned with each launch (Launched.llvm_opt) so runs record what ran.

Triton compiles everything at O3 and has no per-kernel switch, so `install()` wraps the compiler's LLVM-IR stage
for our kernels' entry points only (each variant's KernelVariant.entry_points), at the level asked for by the launching thread (`compiling_at`).
The level is also a constexpr of every launch, so binaries of different levels never share a cache entry.

CONVTUNE_LLVM_OPT=auto|O0|O1|O2|O3: auto as above; a level forces it for every binary, unchecked
(O3 = Triton's own: `CONVTUNE_LLVM_OPT=O3 python -m convtune.commands.verify` shows whether a new Triton still
miscompiles).
"""

from __future__ import annotations

import os
import threading
from contextlib import contextmanager
from typing import Any, Callable, Hashable, Iterator

LEVELS = ("O0", "O1", "O2", "O3")


# the jit entry points the registered variants declare (KernelVariant.entry_points; kernels.base.register adds them):
# the binaries this module compiles at its level; anything else (Triton's own kernels, the layout copy) is compiled
# as Triton would
_ENTRY_POINTS: set[str] = set()


def declare(entry_points: tuple[str, ...]) -> None:
    _ENTRY_POINTS.update(entry_points)


def _our_entry_points() -> frozenset[str]:
    return frozenset(_ENTRY_POINTS)


MODES = ("auto",) + LEVELS
ENV = "CONVTUNE_LLVM_OPT"
TRITON_LEVEL = "O3"
FALLBACK_LEVEL = "O0"  # every known wrong case was right here (31 of 31; O1 30 of 31)


class KernelMiscompiled(RuntimeError):
    """A binary was wrong at every level tried: refuse rather than return a wrong answer."""


_thread = threading.local()
_lock = threading.Lock()
_installed = False
_chosen: dict[Hashable, str] = {}


def mode() -> str:
    value = os.environ.get(ENV, "auto").strip()
    value = value if value == "auto" else value.upper()
    if value not in MODES:
        raise ValueError(f"{ENV}={value!r}: expected one of {', '.join(MODES)}")
    return value


@contextmanager
def compiling_at(level: str) -> Iterator[None]:
    """Kernels of ours compiled by this thread inside the block are optimised at `level`."""
    before = getattr(_thread, "level", TRITON_LEVEL)
    _thread.level = level
    try:
        yield
    finally:
        _thread.level = before


def choose(key: Hashable, is_right: Callable[[str], bool], label: Callable[[], str]) -> str:
    """The level to run the binary `key` at. `is_right(level)` compiles and checks it at that level."""
    forced = mode()
    if forced != "auto":
        return forced
    hit = _chosen.get(key)
    if hit is not None:
        return hit
    for level in (TRITON_LEVEL, FALLBACK_LEVEL):
        if is_right(level):
            _chosen[key] = level
            return level
    raise KernelMiscompiled(f"the compiled kernel gives wrong results at LLVM {TRITON_LEVEL} and {FALLBACK_LEVEL} "
                            f"for {label()}: refusing to run it (please report this shape)")


def chosen_levels() -> dict[Hashable, str]:
    """What `choose` decided so far in this process (for reports and tests)."""
    return dict(_chosen)


class _AtLevel:
    """Triton's `llvm` binding module with `optimize_module` run at another level (not at all for O0)."""

    def __init__(self, real: Any, wanted: str) -> None:
        self._real = real
        self._wanted = wanted

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)

    def optimize_module(self, mod: Any, _level: Any, *args: Any, **kwargs: Any) -> None:
        if self._wanted == "O0":
            return None
        return self._real.optimize_module(mod, getattr(self._real, f"OPTIMIZE_{self._wanted}"), *args, **kwargs)


def _wrap_llir(make_llir: Callable[[Any, dict], Any]) -> Callable[[Any, dict], Any]:
    def llir(src: Any, metadata: dict) -> Any:
        wanted = getattr(_thread, "level", TRITON_LEVEL)
        if wanted == TRITON_LEVEL or src.get_entry_func_name() not in _our_entry_points():
            return make_llir(src, metadata)
        import triton.backends.nvidia.compiler as nvidia

        with _lock:  # the swap is module-wide: one compile at a time through it
            real = nvidia.llvm
            nvidia.llvm = _AtLevel(real, wanted)
            try:
                return make_llir(src, metadata)
            finally:
                nvidia.llvm = real

    return llir


def install() -> bool:
    """Chain our stage hook in front of any other. False where this Triton has no stage hook: then every
    level is Triton's, and `python -m convtune.commands.verify` is the only check."""
    global _installed
    if _installed:
        return True
    try:
        from triton import knobs
    except ImportError:
        return False
    if not hasattr(knobs.runtime, "add_stages_inspection_hook"):
        return False
    previous = knobs.runtime.add_stages_inspection_hook

    def hook(*args: Any) -> Any:
        if not args:  # newer Triton first asks the hook for a cache key: (key, hash); our constexpr keys it
            key, digest = previous() if previous is not None else ("", "")
            return f"{key}-convtune-llvm-opt", f"{digest}-convtune-llvm-opt"
        if previous is not None:
            previous(*args)
        backend, stages = args[0], args[1]
        if type(backend).__module__.startswith("triton.backends.nvidia") and "llir" in stages:
            stages["llir"] = _wrap_llir(stages["llir"])
        return None

    knobs.runtime.add_stages_inspection_hook = hook
    _installed = True
    return True
