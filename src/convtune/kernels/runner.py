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
    interpreter, or another Triton): callers then launch through the JIT function. The call goes straight to the
    binary's launcher where it can (`_direct`); launch hooks (profilers) still run: each call reads them."""
    if compiled is None or not hasattr(type(compiled), "__getitem__"):
        return None
    grid = tuple(grid) + (1,) * (3 - len(grid))
    runner = compiled[grid]
    tail = tuple(values[n] for n in fn.arg_names[first:])
    direct = _direct(compiled, grid, runner, tail, first)
    if direct is not None:
        return direct

    def launch(*args: Any, **options: Any) -> None:  # options: the runner's own (stream=)
        runner(*args, *tail, **options)
    return launch


def _direct(compiled: Any, grid: tuple[int, ...], runner: Callable[..., None], tail: tuple,
            first: int) -> Optional[Callable[..., None]]:
    """The launch by the binary's C launcher itself, past Triton's runner and its Python launcher: on the H200's
    host a launch took 12.1 us through them and 6.7 us direct (nchw_igemm 3x3 with a TMA weight; nchw_1x1 11.4 and
    6.7, fold_igemm's three descriptors 14.6 and 7.8); a converted ResNet-50's batch-32 forward took 0.814 of the
    time it took through them. A TMA descriptor is encoded once per pointer, shape, strides and block and kept (the
    encoding is a function of those alone; 64 a binary at most). Where a launch hook is set, Triton's runner
    launches, so that the hook sees it. None where this Triton's launcher is not the one this is written against
    (Triton 3.6's CUDA launcher: a C `launch`, wrapped by a function that encodes the descriptors where the kernel
    takes some), or the binary needs scratch memory (the runner allocates it)."""
    try:
        from triton import knobs
        from triton.backends.nvidia import driver as nvidia
        from triton.runtime import driver

        launcher = compiled.run
        if type(launcher) is not nvidia.CudaLauncher or launcher.global_scratch_size or \
                launcher.profile_scratch_size or nvidia._BASE_ARGS_FORMAT_LEN != 13:
            return None
        c_launch, descriptors = _c_launch(launcher.launch)
        if any(i >= first for i in descriptors):  # a descriptor among the constexprs: not a launch this knows
            return None
        function, metadata = compiled.function, compiled.packed_metadata
        cooperative, pdl = launcher.launch_cooperative_grid, launcher.launch_pdl
        runtime, active = knobs.runtime, driver.active
        encode = nvidia.make_tensordesc_arg
    except (AttributeError, ImportError, TypeError, ValueError):
        return None
    gx, gy, gz = grid
    if not descriptors:
        def launch(*args: Any, stream: Optional[int] = None) -> None:
            if _hooked(runtime):
                return runner(*args, *tail, stream=stream)
            if stream is None:
                stream = active.get_current_stream(active.get_current_device())
            c_launch(gx, gy, gz, stream, function, cooperative, pdl, None, None, metadata, None, None, None, *args,
                     *tail)
        return launch

    encoded: dict[tuple, list] = {}
    backwards = sorted(descriptors.items(), reverse=True)  # expanded from the last, so the earlier indices hold

    def launch_encoded(*args: Any, stream: Optional[int] = None) -> None:
        if _hooked(runtime):
            return runner(*args, *tail, stream=stream)
        if stream is None:
            stream = active.get_current_stream(active.get_current_device())
        expanded = list(args)
        for i, meta in backwards:
            d = expanded[i]
            key = (i, d.base.data_ptr(), *d.shape, *d.strides, *d.block_shape, d.padding)
            fields = encoded.get(key)
            if fields is None:
                if len(encoded) >= 64:
                    encoded.clear()
                fields = encoded[key] = encode(d, meta)
            expanded[i:i + 1] = fields
        c_launch(gx, gy, gz, stream, function, cooperative, pdl, None, None, metadata, None, None, None, *expanded,
                 *tail)
    return launch_encoded


def _hooked(runtime: Any) -> bool:
    """Whether a launch hook is set: a function, or a HookChain (Triton's default: a chain, which the runner calls on
    every launch) that holds one."""
    enter, leave = runtime.launch_enter_hook, runtime.launch_exit_hook
    return bool(enter is not None and getattr(enter, "calls", True) or leave is not None and getattr(leave, "calls", True))


def _c_launch(launch: Callable[..., None]) -> tuple[Callable[..., None], dict[int, Any]]:
    """The C launch under Triton 3.6's launcher, and the kernel arguments it takes as TMA descriptors (index → the
    compiled descriptor's metadata). Without descriptors the launcher's `launch` is the C function itself; with them
    it is a Python function (driver.wrap_handle_tensordesc) holding the C function, the descriptors' indices and their
    metadata. Raises ValueError for anything else, or for descriptors without metadata (whose arguments hold the
    tensor itself: not kept here)."""
    code = getattr(launch, "__code__", None)
    if code is None:  # the C function
        return launch, {}
    cells = dict(zip(code.co_freevars, (c.cell_contents for c in launch.__closure__ or ())))
    if set(cells) != {"launcher", "tensordesc_indices", "tensordesc_meta"}:
        raise ValueError(f"an unknown launcher wrapper: {sorted(cells)}")
    indices, metas = sorted(cells["tensordesc_indices"]), cells["tensordesc_meta"]
    if len(indices) != len(metas) or any(m is None for m in metas):
        raise ValueError("TMA descriptors without their metadata")
    return cells["launcher"], dict(zip(indices, metas))


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
