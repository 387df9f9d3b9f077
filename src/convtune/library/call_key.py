"""What the pins key a library call by, read off its tensors: the GPU (device_key), the precision torch would run
it at (default_precision), its layout by torch's own output rule (call_layout, output_format); and what no kernel of
convtune takes, so torch runs it whatever the pins say (why_torch).
"""

from __future__ import annotations

import os
from typing import Any, Optional

import torch

from convtune.errors import UnsupportedProblem
from convtune.kernels import torch_conv
from convtune.kernels.conv_args import DTYPE_NAMES, TORCH_DTYPES

# What some kernel of convtune takes (kernels.base.DTYPES); each variant's Host checks its own
TAKEN_DTYPES = tuple(TORCH_DTYPES.values())


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
    return precision_for(torch_conv.cudnn_allows_tf32())


def constant_when_traced(fn: Any) -> Any:
    """torch.compiler.assume_constant_result: torch.compile calls `fn` once as it traces and keeps the answer as a
    constant. Marked here as torch's decorator marks it, without the import of torch._dynamo that the decorator makes:
    importing convtune.library.nn after torch takes 0.7 CPU-s so, 2.9 with that import (the mark is checked against
    torch's by tests/test_autograd_compile.py)."""
    fn._dynamo_marked_constant = True
    return fn


def precision_for(tf32_allowed: bool) -> str:
    """default_precision for a known state of cuDNN's TF32 flag (a caller that already read it)."""
    return "tf32" if tf32_allowed else "ieee"


@constant_when_traced
def _traced_default_precision() -> str:
    """default_precision for torch.compile, which cannot trace the C getter: read once at trace time."""
    return default_precision()


def autocast_args(input: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor],
                  dt: Optional[torch.dtype] = None) -> tuple[torch.Tensor, torch.Tensor, Optional[torch.Tensor]]:
    """The tensors torch's convolution would compute with under torch.autocast: in an autocast region of the input's
    device, conv2d is a lower-precision op, and every floating tensor of it is cast to the region's dtype (bfloat16 or
    float16; `dt` where the caller has read it); elsewhere, the tensors as given. What the pins then key the call by is
    that dtype."""
    dt = dt or autocast_dtype(input)
    if dt is None:
        return input, weight, bias
    cast = lambda t: t.to(dt) if t is not None and t.is_floating_point() and t.dtype is not dt else t  # noqa: E731
    return cast(input), cast(weight), cast(bias)


def autocast_dtype(input: torch.Tensor, traced: bool = False) -> Optional[torch.dtype]:
    """The dtype torch.autocast computes a convolution of `input` in, or None outside an autocast region. `traced`:
    read while torch.compile traces, once (_traced_autocast)."""
    kind = input.device.type
    if traced:
        name = _traced_autocast(kind)
        return TORCH_DTYPES[name] if name and input.is_floating_point() else None
    return torch.get_autocast_dtype(kind) if torch.is_autocast_enabled(kind) and input.is_floating_point() else None


@constant_when_traced
def _traced_autocast(device_type: str) -> str:
    """The autocast dtype's name for torch.compile ('' outside a region), read at trace time as a constant: dynamo
    guards the graph on the autocast state, and a call of get_autocast_dtype inside the graph is a call it may not
    trace."""
    if not torch.is_autocast_enabled(device_type):
        return ""
    return DTYPE_NAMES[torch.get_autocast_dtype(device_type)]


def call_layout(input: torch.Tensor, weight: torch.Tensor) -> str:
    """The layout of a call as the pins name it: channels_last where torch's output would be (output_format)."""
    return "channels_last" if output_format(input, weight) is torch.channels_last else "nchw"


def output_format(input: torch.Tensor, weight: torch.Tensor) -> torch.memory_format:
    """Torch's rule for a convolution's output: channels_last if the input's or the weight's strides are
    channels_last-like (Tensor::suggest_memory_format), else NCHW. The stride walk (2.3 us a call on the CPU
    here) runs only where the layout is not plainly NCHW."""
    def like(t: torch.Tensor) -> bool:  # an NCHW tensor that is not also channels_last-contiguous: no (0.3 us)
        return (not t.is_contiguous() or t.is_contiguous(memory_format=torch.channels_last)) and \
            _strides_like_channels_last(t)
    return torch.channels_last if like(input) or like(weight) else torch.contiguous_format


def _strides_like_channels_last(t: torch.Tensor) -> bool:
    """c10's is_channels_last_strides_2d_s4, which decides a tensor's suggested layout from its strides. Where
    sizes of 1 make both layouts contiguous (C=1, or a 1×1 weight), the strides still tell: `.to(memory_format=
    torch.channels_last)` writes channels_last strides, and cuDNN then returns channels_last (seen on the H200:
    `is_contiguous(channels_last) and not is_contiguous()` got 10 of 300 such calls wrong)."""
    if t.dim() != 4 or t.stride(1) == 0:
        return False
    low = 0
    for d in (1, 3, 2, 0):
        size, stride = t.size(d), t.stride(d)
        if size == 0 or stride < low or (d == 0 and low == t.stride(1)):
            return False
        low = stride * size if size > 1 else stride
    return True


def why_torch(input: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor], groups: int,
              padding: Any, cast_to: Optional[torch.dtype] = None) -> Optional[str]:
    """Why convtune.conv2d hands a call to torch's own convolution whatever the pins say, in words (None: the pins
    decide): what no kernel of convtune takes, with the floating tensors cast to `cast_to` (autocast's dtype) where
    given. As convtune.nn.Conv2d does for such a layer or input."""
    if not input.is_cuda and os.environ.get("TRITON_INTERPRET") != "1":
        return f"input on {input.device} (the kernels run on CUDA tensors, or on the CPU under TRITON_INTERPRET=1)"
    if groups != 1:
        return f"groups={groups} (the kernels take groups=1)"
    if isinstance(padding, str):
        return f"padding={padding!r} (the kernels take numbers)"
    dtypes = [(name, cast_to if cast_to is not None and t.is_floating_point() else t.dtype)
              for name, t in (("input", input), ("weight", weight), ("bias", bias)) if t is not None]
    for name, dtype in dtypes:
        if dtype not in TAKEN_DTYPES:
            return f"{name} is {dtype} (the kernels take float32, bfloat16 and float16)"
        if dtype is not dtypes[0][1]:
            return f"{name} is {dtype}, input {dtypes[0][1]} (torch decides what a mix of dtypes means)"
    if dtypes[0][1] is torch.bfloat16 and not input.is_cuda:
        return BF16_ON_CPU
    if input.dim() != 4:
        return f"{input.dim()}-d input (the kernels take a batch, N×C×H×W)"
    return None


BF16_ON_CPU = "bfloat16 on the CPU (the Triton interpreter computes it wrong: numpy has no bfloat16)"
