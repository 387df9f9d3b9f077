"""A convolution call's arguments checked as torch checks them, and its geometry (sizes, stride, padding, dilation).

A call torch refuses is refused here with torch's kind of error (InvalidConvolution); one torch takes and a kernel
does not is an UnsupportedProblem, so the library can run torch instead.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

import torch

from convtune.errors import ConfigError, InvalidConvolution, UnsupportedProblem
from convtune.kernels.precision import INTERPRETED

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


TORCH_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
DTYPE_NAMES = {v: k for k, v in TORCH_DTYPES.items()}


def dtype_name(t: torch.Tensor) -> str:
    """A tensor's dtype as problems, pins and variants spell it (float32, bfloat16, float16), else torch's name."""
    return DTYPE_NAMES.get(t.dtype, str(t.dtype).removeprefix("torch."))


def check_dtypes(x: torch.Tensor, w: torch.Tensor, b: Optional[torch.Tensor], dtypes: tuple[str, ...]) -> None:
    """One dtype for input, weight and bias (torch refuses a mix outside autocast), and one the kernel takes."""
    for name, t in (("weight", w), ("bias", b)):
        if t is not None and t.dtype != x.dtype:
            raise UnsupportedProblem(f"{name} is {dtype_name(t)}, input {dtype_name(x)}: one dtype for all three")
    if dtype_name(x) not in dtypes:
        raise UnsupportedProblem(f"input is {dtype_name(x)}; the kernel takes {' or '.join(dtypes)}")
    if x.dtype is torch.bfloat16 and INTERPRETED:
        raise UnsupportedProblem("bfloat16 needs a GPU: the Triton interpreter computes it wrong (numpy has no "
                                 "bfloat16)")


def check_conv_inputs(x: torch.Tensor, w: torch.Tensor, b: Optional[torch.Tensor], groups: int,
                      contiguous: bool = True, dtypes: tuple[str, ...] = ("float32",)) -> None:
    """The checks a launcher makes before it allocates anything; the message says what is needed.
    `contiguous=False`: a launcher that converts the layout itself takes any strides; `dtypes`: what it takes."""
    if groups != 1:
        raise UnsupportedProblem(f"groups={groups} is not supported (only groups=1)")
    if x.dim() != 4 or w.dim() != 4:
        raise UnsupportedProblem(f"need 4-d NCHW input and weight, got {x.dim()}-d and {w.dim()}-d")
    check_dtypes(x, w, b, dtypes)
    for name, t in (("input", x), ("weight", w)) + ((("bias", b),) if b is not None else ()):
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
        out = torch.empty(shape, device=x.device, dtype=x.dtype)
    else:
        check_out(x, out, shape, out_channels_last)
    return g, out


def check_out(x: torch.Tensor, out: torch.Tensor, shape: tuple[int, int, int, int], channels_last_ok: bool) -> None:
    """A given `out` must have x's dtype, be shaped `shape`, on x's device, NCHW-contiguous (or channels_last where
    the launcher writes that layout too)."""
    if (tuple(out.shape) != shape or out.dtype != x.dtype or out.device != x.device
            or not (out.is_contiguous() or (channels_last_ok and out.is_contiguous(memory_format=torch.channels_last)))):
        layouts = "contiguous or channels_last" if channels_last_ok else "contiguous"
        raise UnsupportedProblem(f"out must be a {layouts} {dtype_name(x)} {shape} tensor on {x.device}, got "
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
