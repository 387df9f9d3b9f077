"""`convtune.conv2d`: the library call. Runs the fast kernel with the configuration pinned for this GPU,
problem and precision; never autotunes. A lookup happens once per call signature and is then cached."""

from __future__ import annotations

import logging
import os
from typing import Any, Optional

import torch

from convtune.errors import UnsupportedProblem
from convtune.kernels import configured_meta, get_variant, pins
from convtune.kernels import implicit_gemm as ig
from convtune.kernels.common import Meta, prepare
from convtune.problem import ConvProblem

LIBRARY_KERNEL = "implicit_gemm"
log = logging.getLogger(__name__)
_plans: dict[tuple[Any, ...], Any] = {}
_F32 = torch.float32


def device_key(t: torch.Tensor) -> str:
    """The pins' GPU key: the CUDA device's name, or 'interpreter' for CPU tensors under TRITON_INTERPRET=1."""
    if t.is_cuda:
        return torch.cuda.get_device_name(t.device)
    if os.environ.get("TRITON_INTERPRET") == "1":
        return "interpreter"
    raise UnsupportedProblem(f"convtune.conv2d runs on CUDA tensors (got {t.device}); on the CPU use "
                             "torch.nn.functional.conv2d, or set TRITON_INTERPRET=1 before importing convtune")


# torch.backends.cudnn.allow_tf32 goes through a context-property object (1.3 us a read on this machine);
# the C getter behind it costs ~0.1 us. Fall back to the public flag if a torch build lacks the getter.
_allow_tf32 = getattr(torch._C, "_get_cudnn_allow_tf32", lambda: torch.backends.cudnn.allow_tf32)


def default_precision() -> str:
    """As torch does for fp32 convolutions: TF32 unless torch.backends.cudnn.allow_tf32 is off."""
    return "tf32" if _allow_tf32() else "ieee"


def choose_meta(x: torch.Tensor, weight: torch.Tensor, has_bias: bool, stride: tuple[int, int],
                padding: tuple[int, int], dilation: tuple[int, int], precision: str) -> Meta:
    n, c, h, w = x.shape
    c_out, _, kh, kw = weight.shape
    p = ConvProblem("", n, c, h, w, c_out, kh, kw, stride, padding, dilation, 1, has_bias)
    path = pins.default_path()
    meta, source = configured_meta(get_variant(LIBRARY_KERNEL), path, device_key(x), p, precision)
    log.debug("convtune.conv2d %s/%s: %s from %s (%s)", p.key(), precision, meta.short(), source, path)
    return meta


def _plan(x: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor], stride: Any, padding: Any,
          dilation: Any, groups: int, precision: str) -> ig.LaunchPlan:
    """The first call of a signature: every check, the pin lookup, the launch plan."""
    if isinstance(padding, str):
        raise UnsupportedProblem(f"padding={padding!r} is not supported; give numbers (int or pair)")
    g, _ = prepare(x, weight, bias, stride, padding, dilation, None, groups)
    meta = choose_meta(x, weight, bias is not None, g.stride, g.padding, g.dilation, precision)
    return ig.make_plan(g, bias is not None, ig.choose_vec(x, g.w, g.stride[1], g.dilation[1], precision), meta, precision)


def _hashable(v: Any) -> Any:
    return v if isinstance(v, (int, str)) else tuple(v)


def conv2d(input: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor] = None, stride: Any = 1,
           padding: Any = 0, dilation: Any = 1, groups: int = 1, precision: Optional[str] = None) -> torch.Tensor:
    """torch.nn.functional.conv2d for float32 NCHW tensors with groups=1 and numeric padding.

    The first call of a signature (shapes, strides, padding, precision, device, input alignment) checks
    everything, looks up the pin and caches a launch plan; later calls check contiguity and dtype only."""
    precision = precision or default_precision()
    key = (input.shape, weight.shape, bias is None, _hashable(stride), _hashable(padding), _hashable(dilation),
           groups, precision, input.get_device(), input.data_ptr() & 15)
    plan = _plans.get(key)
    if plan is None:
        plan = _plans[key] = _plan(input, weight, bias, stride, padding, dilation, groups, precision)
    elif not (input.is_contiguous() and weight.is_contiguous() and input.dtype is _F32 and weight.dtype is _F32
              and weight.get_device() == key[8]
              and (bias is None or (bias.is_contiguous() and bias.dtype is _F32 and bias.get_device() == key[8]))):
        prepare(input, weight, bias, stride, padding, dilation, None, groups)  # raises the precise error
    out = torch.empty(plan.out_shape, device=input.device, dtype=torch.float32)
    ig.run(plan, input, weight, bias, out)
    return out


def forget_choices() -> None:
    """Drop cached plans (after the pins file changed in this process)."""
    _plans.clear()
