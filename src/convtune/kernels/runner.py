"""What a launch gives back (`Launched`), a launch bound past Triton's dispatch (`bound_runner`), and a weight's
packed form kept until the weight changes (`WeightCache`).
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

import torch

class WeightCache:
    """A weight's packed form (what `make(weight)` returns), kept per weight tensor (by identity, checked through
    a weak reference) and its version counter and data pointer, so an in-place update (an optimiser step) or
    `param.data = other` (as Module.to does) packs again and a steady-state call packs nothing."""

    def __init__(self) -> None:
        self._entries: dict[int, tuple[Any, tuple, torch.Tensor]] = {}

    def get(self, weight: torch.Tensor, key: tuple, make: Callable[[torch.Tensor], torch.Tensor]) -> torch.Tensor:
        state = (weight._version, weight.data_ptr()) + key
        hit = self._entries.get(id(weight))
        if hit is not None and hit[0]() is weight and hit[1] == state:
            return hit[2]
        if len(self._entries) > 64:  # drop entries whose weight is gone
            for k in [k for k, v in self._entries.items() if v[0]() is None]:
                del self._entries[k]
        packed = make(weight)
        self._entries[id(weight)] = (weakref.ref(weight), state, packed)
        return packed


def bound_runner(compiled: Any, grid: tuple[int, ...], fn: Any, first: int,
                 values: dict[str, Any]) -> Optional[Callable[..., Any]]:
    """A launch of an already compiled (and checked) binary that skips Triton's per-call dispatch
    (JITFunction.run: binding every argument, the specialisation key, the cache lookup), which is most of a launch's
    host time (44.9 us of one nhwc conv launch on the H200, against 44.3 us for
    cuDNN's whole call). `fn`'s arguments from index `first` on are constexprs, taken from `values`; the returned
    call takes the runtime arguments before them. None where this Triton's compiled kernel has no runner (the
    interpreter, or another Triton): callers then launch through the JIT function. Launch hooks (profilers) still
    run: Triton's runner reads them on every call."""
    if compiled is None or not hasattr(type(compiled), "__getitem__"):
        return None
    runner = compiled[tuple(grid) + (1,) * (3 - len(grid))]
    tail = tuple(values[n] for n in fn.arg_names[first:])

    def launch(*args: Any, **options: Any) -> None:  # options: the runner's own (stream=)
        runner(*args, *tail, **options)
    return launch


@dataclass
class Launched:
    """What a launch returns besides the output: the compiled kernel's resource use, where known."""

    out: torch.Tensor = field(repr=False)
    n_regs: Optional[int] = None
    n_spills: Optional[int] = None
    shared_bytes: Optional[int] = None
    llvm_opt: str = "none"  # the LLVM level the binary was compiled at (kernels/llvm_opt.py); none: interpreter
    compiled: Any = field(default=None, repr=False)  # Triton's compiled kernel (its .asm: ttgir, ptx), if any

    @staticmethod
    def from_compiled(out: torch.Tensor, compiled: Any, llvm_opt: str = "none") -> "Launched":
        # The Triton interpreter returns no compiled kernel, and so no resource figures.
        if compiled is None or not hasattr(compiled, "n_regs"):
            return Launched(out, llvm_opt=llvm_opt)
        shared = getattr(getattr(compiled, "metadata", None), "shared", None)
        return Launched(out, int(compiled.n_regs), int(compiled.n_spills), None if shared is None else int(shared),
                        llvm_opt, compiled)
