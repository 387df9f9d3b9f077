"""What every kernel variant shares: launch meta-parameters, their validation, input checks, source hashes.

Imports torch only (and the project's leaf `errors`): this room knows nothing of Hydra or MLflow.
"""

from __future__ import annotations

import math
import random
import weakref
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Callable, Optional

import torch

from convtune.errors import ConfigError, InvalidConvolution, UnsupportedProblem
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


def pair(name: str, v: Any) -> tuple[int, int]:
    """torch's convention: an int means the same value for height and width."""
    if isinstance(v, int):
        return (v, v)
    t = tuple(int(e) for e in v)
    if len(t) != 2:
        raise ConfigError(name, list(v), "an int or a pair [height, width]")
    return t  # type: ignore[return-value]


def out_size(size: int, k: int, stride: int, pad: int, dil: int) -> int:
    return (size + 2 * pad - dil * (k - 1) - 1) // stride + 1


def check_conv_inputs(x: torch.Tensor, w: torch.Tensor, b: Optional[torch.Tensor], groups: int,
                      contiguous: bool = True) -> None:
    """The checks a launcher makes before it allocates anything; the message says what is needed.
    `contiguous=False`: a launcher that converts the layout itself takes any strides."""
    if groups != 1:
        raise UnsupportedProblem(f"groups={groups} is not supported (only groups=1)")
    if x.dim() != 4 or w.dim() != 4:
        raise UnsupportedProblem(f"need 4-d NCHW input and weight, got {x.dim()}-d and {w.dim()}-d")
    for name, t in (("input", x), ("weight", w)) + ((("bias", b),) if b is not None else ()):
        if t.dtype != torch.float32:
            raise UnsupportedProblem(f"{name} must be float32, got {t.dtype}")
        if t.device != x.device:
            raise UnsupportedProblem(f"{name} is on {t.device}, input on {x.device}")
        if contiguous and not t.is_contiguous():
            raise UnsupportedProblem(f"{name} must be contiguous (NCHW); call .contiguous() first")
    if w.shape[1] != x.shape[1]:
        raise UnsupportedProblem(f"weight has {w.shape[1]} input channels, input has {x.shape[1]}")
    check_weight_and_bias(w, b)
    for name, t in (("input", x), ("weight", w)):
        if t.numel() >= 2**31:
            raise UnsupportedProblem(f"{name} has {t.numel()} elements; int32 indexing allows < 2**31")


def check_weight_and_bias(w: torch.Tensor, b: Optional[torch.Tensor]) -> None:
    """What torch's convolution refuses of a weight and bias, in its words (InvalidConvolution)."""
    if w.shape[0] == 0:
        raise InvalidConvolution(f"Given groups=1, expected weight to be at least 1 at dimension 0, but got weight of "
                                 f"size {list(w.shape)} instead")
    if w.shape[2] == 0 or w.shape[3] == 0:
        raise InvalidConvolution(f"kernel size should be greater than zero, but got kernel_height: {w.shape[2]} "
                                 f"kernel_width: {w.shape[3]}")
    if b is not None and (b.dim() != 1 or b.shape[0] != w.shape[0]):
        raise InvalidConvolution(f"Given weight of size {list(w.shape)}, expected bias to be 1-dimensional with "
                                 f"{w.shape[0]} elements, but got bias of size {list(b.shape)} instead")


def check_geometry(stride: tuple[int, int], padding: tuple[int, int], dilation: tuple[int, int]) -> None:
    """What torch's convolution refuses of stride, padding and dilation, in its words (InvalidConvolution)."""
    if min(stride) <= 0:
        raise InvalidConvolution("non-positive stride is not supported")
    if min(padding) < 0:
        raise InvalidConvolution("negative padding is not supported")
    if min(dilation) <= 0:
        raise InvalidConvolution(f"dilation should be greater than zero, but got {list(dilation)}")


@dataclass(frozen=True)
class ConvGeometry:
    """Sizes of one checked conv2d call, as its launcher needs them."""

    n: int
    c: int
    h: int
    w: int
    c_out: int
    kh: int
    kw: int
    oh: int
    ow: int
    stride: tuple[int, int]
    padding: tuple[int, int]
    dilation: tuple[int, int]


def prepare(x: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor], stride: Any, padding: Any,
            dilation: Any, out: Optional[torch.Tensor], groups: int,
            out_channels_last: bool = False) -> tuple[ConvGeometry, torch.Tensor]:
    """A launcher's first step: check the inputs, work out the sizes, allocate or check `out`.
    `out_channels_last`: the launcher can write a channels_last `out` as well as an NCHW one."""
    check_conv_inputs(x, weight, bias, groups)
    g = geometry(x, weight, stride, padding, dilation)
    shape = (g.n, g.c_out, g.oh, g.ow)
    if out is None:
        out = torch.empty(shape, device=x.device, dtype=torch.float32)
    else:
        check_out(x, out, shape, out_channels_last)
    return g, out


def check_out(x: torch.Tensor, out: torch.Tensor, shape: tuple[int, int, int, int], channels_last_ok: bool) -> None:
    """A given `out` must be float32, shaped `shape`, on x's device, NCHW-contiguous (or channels_last where the
    launcher writes that layout too)."""
    if (tuple(out.shape) != shape or out.dtype != torch.float32 or out.device != x.device
            or not (out.is_contiguous() or (channels_last_ok and out.is_contiguous(memory_format=torch.channels_last)))):
        layouts = "contiguous or channels_last" if channels_last_ok else "contiguous"
        raise UnsupportedProblem(f"out must be a {layouts} float32 {shape} tensor on {x.device}, got "
                                 f"{tuple(out.shape)} {out.dtype} on {out.device} with strides {out.stride()}")


def writes_channels_last(out: torch.Tensor) -> bool:
    """Whether a launcher writes `out` channels_last: it is channels_last-contiguous and not also NCHW-contiguous
    (for N·C·H·W with C or H·W of 1 the two layouts are one, and either order of writes fills it)."""
    return out.is_contiguous(memory_format=torch.channels_last) and not (out.is_contiguous() and out.shape[1] > 1)


def geometry(x: torch.Tensor, weight: torch.Tensor, stride: Any, padding: Any, dilation: Any) -> ConvGeometry:
    """The sizes of a checked call (check_conv_inputs); refuses an output of no positions."""
    st, pd, dl = pair("stride", stride), pair("padding", padding), pair("dilation", dilation)
    check_geometry(st, pd, dl)
    check_weight_and_bias(weight, None)
    n, c, h, w = x.shape
    c_out, _, kh, kw = weight.shape
    oh, ow = out_size(h, kh, st[0], pd[0], dl[0]), out_size(w, kw, st[1], pd[1], dl[1])
    if oh <= 0 or ow <= 0:
        raise UnsupportedProblem(f"output would be {oh}x{ow}: the kernel does not fit the padded input")
    return ConvGeometry(n, c, h, w, c_out, kh, kw, oh, ow, st, pd, dl)


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


def log_uniform_int(rng: random.Random, lo: int, hi: int) -> int:
    """An integer in [lo, hi], log-uniform: small sizes as often as large ones (the correctness cases' draws)."""
    return int(round(math.exp(rng.uniform(math.log(lo), math.log(hi)))))


def safe_stages(num_stages: int, k_steps: int) -> int:
    """The pipeline depth to compile a K loop of `k_steps` iterations (a constexpr trip count) at: `num_stages`, less
    one where the loop would run exactly num_stages - 1 times (num_stages >= 3). Why: on the H200 (Triton 3.6.0),
    nhwc_igemm with A rounded in the kernel and 256-wide N tiles gave wrong sums, different from launch to launch
    (relative errors 1e-2 to 1.4e-1; at O0 too, so not LLVM), at those trip counts only: 2 steps at 3 stages, 3 at 4
    (4 of the 5 such binaries of a map of 1 to 108 steps at 2 to 4 stages; 128-wide tiles 0 of 6), and right at every
    other count (tests/gpu_scripts/nhwc_short_k.py checks the fix). A loop that short has every load in flight at one
    stage less as well."""
    return num_stages - 1 if num_stages >= 3 and k_steps == num_stages - 1 else num_stages


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
