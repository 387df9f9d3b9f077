"""The host side every kernel variant shares, written once: check a call, plan it, allocate its output,
give the kernel its input, launch; the cache of bound launches; the one-image check of a fresh binary.

A variant supplies three functions and gets `launch` (one checked call, as the tracker times it) and `prepared`
(everything decided once, as the library and the contest call it) from `Host`:
- `plan(x, geometry, has_bias, meta, precision, out_channels_last, **options)`: its LaunchPlan, or
  UnsupportedProblem / ConfigError in one line (`without_input` adapts a make_plan that needs no look at `x`);
- `kernel_input(x, plan)`: the input as the kernel reads it (a copy into its layout, rounded, or `x` itself);
- `run(plan, x, weight, bias, out)`: the launch on checked tensors, returning (compiled kernel, LLVM level); a variant
  that fuses epilogues (`Host.epilogues`) takes the call's kernels.epilogue.Epilogue after `out` when it has a chain,
  and its plan the chain as `chain`.

`BoundLaunches` is the per-variant cache behind `run`: a binary's first launch is checked once on one random image
(kernels/llvm_opt: why) and then bound past Triton's per-call dispatch (runner.bound_runner: why). `one_image` makes
that check's tensors. Imports torch only (and the kernels room's own leaves).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Optional, Union

import torch

from convtune.errors import UnsupportedProblem
from convtune.kernels import llvm_opt
from convtune.kernels.conv_args import check_conv_inputs, check_out, dtype_name, geometry, writes_channels_last
from convtune.kernels.epilogue import Epilogue
from convtune.kernels.meta import Meta
from convtune.kernels.precision import kernel_precision
from convtune.kernels.runner import Launched, bound_runner
from convtune.kernels.selfcheck import aligned_nan, aligned_random

Plan = Any  # a variant's LaunchPlan


def without_input(make_plan: Callable[..., Plan]) -> Callable[..., Plan]:
    """A Host.plan from a make_plan(geometry, has_bias, meta, precision, out_channels_last, **options) that needs no
    look at the input."""
    return lambda x, g, has_bias, meta, precision, out_cl, **options: make_plan(g, has_bias, meta, precision, out_cl,
                                                                                  **options)


@dataclass(frozen=True)
class Host:
    """How a variant is called: its plan (which refuses a device it cannot run on, too), the input as it reads it, its
    run (above); the layout it writes when the caller gives no output (`channels_last`); and whether its kernel reads
    the weight tensor itself rather than a packed copy (`weight_as_is`: the weight must then be contiguous)."""

    plan: Callable[..., Plan]
    kernel_input: Callable[[torch.Tensor, Plan], torch.Tensor]
    run: Callable[..., tuple[Any, str]]
    channels_last: bool = False
    weight_as_is: bool = False
    dtypes: tuple[str, ...] = ("float32",)  # what it takes (its KernelVariant.dtypes); the output has the input's
    epilogues: tuple[str, ...] = ()  # the epilogue ops it fuses (its KernelVariant.epilogues)

    def plan_for(self, x: torch.Tensor, g: Any, has_bias: bool, meta: Meta, precision: str, out_cl: bool,
                 **options: Any) -> Plan:
        """The variant's plan for a checked call, made at precision.kernel_precision for the input's dtype (a 16-bit
        call: tf32_trunc, whatever float32's math mode says)."""
        return self.plan(x, g, has_bias, meta, kernel_precision(precision, dtype_name(x)), out_cl, **options)

    def checked_plan(self, x: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor], stride: Any,
                     padding: Any, dilation: Any, meta: Meta, precision: str, out: Optional[torch.Tensor], groups: int,
                     epilogue: Optional[Epilogue] = None, **options: Any) -> tuple[Plan, torch.Tensor]:
        """Every check of a call, its plan, and its output: `out` checked (NCHW or channels_last), or allocated in the
        variant's layout once the plan has accepted the call, in the input's dtype. A 16-bit call is planned at
        precision.kernel_precision's `tf32_trunc` whatever `precision` says (float32's math mode). An `epilogue` with
        a chain must be one the variant fuses, its tensors fit for the output."""
        check_conv_inputs(x, weight, bias, groups, contiguous=False, dtypes=self.dtypes)
        if epilogue is not None and epilogue.chain:
            unfused = [op for op in epilogue.chain if op not in self.epilogues]
            if unfused:
                fuses = f"fuses {', '.join(self.epilogues)} only" if self.epilogues else "fuses no epilogue"
                raise UnsupportedProblem(f"the kernel {fuses}, not {', '.join(unfused)}")
            options["chain"] = epilogue.chain
        for name, t in (("weight", weight if self.weight_as_is else None), ("bias", bias)):
            if t is not None and not t.is_contiguous():  # every kernel reads the bias by its pointer
                raise UnsupportedProblem(f"{name} must be contiguous; call .contiguous() first")
        g = geometry(x, weight, stride, padding, dilation)
        shape = (g.n, g.c_out, g.oh, g.ow)
        if out is not None:
            check_out(x, out, shape, channels_last_ok=True)
        if epilogue is not None and epilogue.chain:
            epilogue.check(shape, x.dtype, x.device)
        layout = torch.channels_last if self.channels_last else torch.contiguous_format
        # the layout is read off the tensor as it will be: for C_out or OH·OW of 1 the two layouts are one
        out_cl = writes_channels_last(out if out is not None else torch.empty(shape, device="meta",
                                                                              memory_format=layout))
        plan = self.plan_for(x, g, bias is not None, meta, precision, out_cl, **options)
        if out is None:
            out = torch.empty(shape, device=x.device, dtype=x.dtype, memory_format=layout)
        return plan, out

    def launch(self, x: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor], stride: Any, padding: Any,
               dilation: Any, meta: Meta, precision: str = "tf32", out: Optional[torch.Tensor] = None,
               groups: int = 1, epilogue: Optional[Epilogue] = None, **options: Any) -> Launched:
        """Check, plan, allocate (unless `out` is given) and launch once. An input the kernel does not read as it is
        gets its copy (kernel_input) inside this call, and so inside any timing of it. `epilogue`: what follows the
        convolution in the same kernel (kernels/epilogue.py). `options`: the variant's make_plan's own."""
        plan, out = self.checked_plan(x, weight, bias, stride, padding, dilation, meta, precision, out, groups,
                                      epilogue, **options)
        compiled, level = self.run(plan, self.kernel_input(x, plan), weight, bias, out, *_fused(epilogue))
        return Launched.from_compiled(out, compiled, level)

    def prepared(self, x: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor], stride: Any,
                 padding: Any, dilation: Any, meta: Meta, precision: str = "tf32", out: Optional[torch.Tensor] = None,
                 groups: int = 1, epilogue: Optional[Epilogue] = None, **options: Any) -> Callable[[], torch.Tensor]:
        """`launch` as the library makes it once a call signature has its plan (convtune.library.functional): every
        check and the plan here, once; the returned call gives the kernel its input and launches, writing `out`
        (allocated here if None). The contest times this call from an idle GPU, where the host's work counts."""
        plan, out = self.checked_plan(x, weight, bias, stride, padding, dilation, meta, precision, out, groups,
                                      epilogue, **options)
        kernel_input, run, fused = self.kernel_input, self.run, _fused(epilogue)

        def call() -> torch.Tensor:
            run(plan, kernel_input(x, plan), weight, bias, out, *fused)
            return out
        return call


def _fused(epilogue: Optional[Epilogue]) -> tuple[Epilogue, ...]:
    """What a variant's run takes after `out`: the epilogue where it has a chain, else nothing (a variant that fuses
    none is never given one)."""
    return (epilogue,) if epilogue is not None and epilogue.chain else ()


def alignment_key(binary_key: tuple, device: torch.device, *tensors: torch.Tensor) -> tuple:
    """A binary's key for a call: Triton specialises on each pointer's dtype and 16-byte alignment, so a binary checked
    for one is not the binary of another (the constexprs of a plan say nothing of dtypes: a bfloat16 binary bound for a
    shape read a float16 call of that shape as bfloat16 on the H200)."""
    return (binary_key, device.index) + tuple((t.data_ptr() & 15, t.dtype) for t in tensors)


@dataclass
class Binary:
    """A checked binary of a variant: its bound launch (None where this Triton has no runner), Triton's compiled
    kernel, the LLVM level it was compiled at, and what the variant keeps with it (a schedule, say)."""

    launch: Optional[Callable[..., None]]
    compiled: Any
    level: str
    extra: Any = None


class BoundLaunches:
    """One variant's binaries, by key (alignment_key, plus the grid or what else picks the binary's launch): the
    first launch of a key is checked on one image and compiled at the level that passes (llvm_opt.choose); later
    launches of it go past Triton's dispatch."""

    def __init__(self, name: str, jit_fn: Callable[[], Any], first_constexpr: int) -> None:
        self.name = name
        self._jit_fn = jit_fn  # a call: a variant whose jit code is imported on first launch names it late
        self._first = first_constexpr  # the jit function's arguments from this index on are constexprs
        self._cache: dict[tuple, Binary] = {}

    def get(self, cache_key: tuple) -> Optional[Binary]:
        return self._cache.get(cache_key)

    def __len__(self) -> int:
        return len(self._cache)

    def clear(self) -> None:
        """Forget every bound launch (the next launch of each binary goes through Triton's dispatch again); the
        levels llvm_opt chose are kept."""
        self._cache.clear()

    def first_launch(self, key: tuple, cache_key: tuple, grid: Union[tuple[int, ...], Callable[[], tuple[int, ...]]],
                     constexprs: dict, right_at: Callable[[str], bool], launch_at: Callable[[str], Any],
                     extra: Callable[[], Any] = lambda: None,
                     after_compile: Optional[Callable[[Any], None]] = None) -> Binary:
        """Choose the level of the binary `key` names (checked once: right_at(level) runs it on one image), launch it
        there (launch_at(level) returns Triton's compiled kernel), bind it for `grid` and keep it under `cache_key`
        with `extra()`. `grid` may be a call, for a launch whose grid launch_at decides (a stream-K schedule)."""
        level = llvm_opt.choose(key, right_at, lambda: f"{self.name} {constexprs}")
        with llvm_opt.compiling_at(level):
            compiled = launch_at(level)
        if after_compile is not None:
            after_compile(compiled)
        grid = grid() if callable(grid) else grid
        bound = bound_runner(compiled, grid, self._jit_fn(), self._first, {**constexprs, "LLVM_OPT": level})
        binary = Binary(bound, compiled, level, extra())
        if bound is not None:
            self._cache[cache_key] = binary
        return binary

    def run(self, key: tuple, grid: tuple[int, ...], args: tuple, constexprs: dict, right_at: Callable[[str], bool],
            launch_at: Callable[[str], Any], after_compile: Optional[Callable[[Any], None]] = None) -> tuple[Any, str]:
        """Launch with runtime arguments `args`: bound where this key has run, else through first_launch."""
        binary = self._cache.get((key, grid))
        if binary is not None:
            binary.launch(*args)
            return binary.compiled, binary.level
        binary = self.first_launch(key, (key, grid), grid, constexprs, right_at, launch_at, after_compile=after_compile)
        return binary.compiled, binary.level


@dataclass
class OneImage:
    """The one-image check's tensors, shaped and 16-byte aligned as the real call's: random input, weight and bias,
    and a NaN output, `x` and `out` as NCHW-shaped views in their real layouts."""

    x: torch.Tensor
    weight: torch.Tensor
    bias: Optional[torch.Tensor]
    out: torch.Tensor


def one_image(x: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor], out: torch.Tensor,
              in_chw: tuple[int, int, int], in_channels_last: bool, out_chw: tuple[int, int, int], out_cl: bool,
              seed: int) -> OneImage:
    """Tensors for checking a fresh binary on one image (kernels/llvm_opt: why), aligned as `x`, `weight`, `bias`
    and `out` are; `in_chw`/`out_chw`: an image's (channels, height, width) as the binary reads and writes them."""
    gen = torch.Generator(device=x.device).manual_seed(seed)
    c, h, w = in_chw
    xs = (aligned_random((1, h, w, c), x, gen).permute(0, 3, 1, 2) if in_channels_last
          else aligned_random((1, c, h, w), x, gen))
    ws = aligned_random(tuple(weight.shape), weight, gen)
    bs = aligned_random(tuple(bias.shape), bias, gen) if bias is not None else None
    k, oh, ow = out_chw
    outs = aligned_nan((1, oh, ow, k), out).permute(0, 3, 1, 2) if out_cl else aligned_nan((1, k, oh, ow), out)
    return OneImage(xs, ws, bs, outs)


__all__ = ["Host", "BoundLaunches", "Binary", "OneImage", "one_image", "alignment_key", "without_input"]
