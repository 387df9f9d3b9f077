"""`convtune.conv2d`: the library call. Runs the fast kernel with the configuration pinned for this GPU,
problem and precision; never autotunes. A lookup happens once per call signature and is then cached."""

from __future__ import annotations

import logging
import os
from typing import Any, Optional

import torch

from convtune.errors import UnsupportedProblem
from convtune.kernels import get_variant, pins
from convtune.kernels.common import Meta, pair
from convtune.problem import ConvProblem

LIBRARY_KERNEL = "implicit_gemm"
log = logging.getLogger(__name__)
_chosen: dict[tuple[Any, ...], Meta] = {}


def device_key(t: torch.Tensor) -> str:
    """The pins' GPU key: the CUDA device's name, or 'interpreter' for CPU tensors under TRITON_INTERPRET=1."""
    if t.is_cuda:
        return torch.cuda.get_device_name(t.device)
    if os.environ.get("TRITON_INTERPRET") == "1":
        return "interpreter"
    raise UnsupportedProblem(f"convtune.conv2d runs on CUDA tensors (got {t.device}); on the CPU use "
                             "torch.nn.functional.conv2d, or set TRITON_INTERPRET=1 before importing convtune")


def default_precision() -> str:
    """As torch does for fp32 convolutions: TF32 unless torch.backends.cudnn.allow_tf32 is off."""
    return "tf32" if torch.backends.cudnn.allow_tf32 else "ieee"


def choose_meta(x: torch.Tensor, weight: torch.Tensor, has_bias: bool, stride: tuple[int, int],
                padding: tuple[int, int], dilation: tuple[int, int], precision: str) -> Meta:
    n, c, h, w = x.shape
    c_out, _, kh, kw = weight.shape
    p = ConvProblem("", n, c, h, w, c_out, kh, kw, stride, padding, dilation, 1, has_bias)
    variant = get_variant(LIBRARY_KERNEL)
    path = pins.default_path()
    meta, source = pins.lookup(pins.load(path), device_key(x), LIBRARY_KERNEL, pins.pin_key(p.key(), precision),
                               lambda: variant.default_meta(c_out, stride[1], w))
    log.debug("convtune.conv2d %s/%s: %s from %s (%s)", p.key(), precision, meta.short(), source, path)
    return meta


def conv2d(input: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor] = None, stride: Any = 1,
           padding: Any = 0, dilation: Any = 1, groups: int = 1, precision: Optional[str] = None) -> torch.Tensor:
    """torch.nn.functional.conv2d for float32 NCHW tensors with groups=1 and numeric padding."""
    if isinstance(padding, str):
        raise UnsupportedProblem(f"padding={padding!r} is not supported; give numbers (int or pair)")
    precision = precision or default_precision()
    st, pd, dl = pair("stride", stride), pair("padding", padding), pair("dilation", dilation)
    key = (input.device, input.shape, weight.shape, bias is not None, st, pd, dl, precision)
    meta = _chosen.get(key)
    if meta is None:
        if input.dim() != 4 or weight.dim() != 4:
            raise UnsupportedProblem(f"need 4-d NCHW input and weight, got {input.dim()}-d and {weight.dim()}-d")
        meta = _chosen[key] = choose_meta(input, weight, bias is not None, st, pd, dl, precision)
    return get_variant(LIBRARY_KERNEL).launch(input, weight, bias, st, pd, dl, meta, precision, groups=groups).out


def forget_choices() -> None:
    """Drop cached lookups (after the pins file changed in this process)."""
    _chosen.clear()
