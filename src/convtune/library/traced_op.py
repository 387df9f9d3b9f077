"""The operator `convtune::conv2d`: what torch.compile sees and traces for a call whose "+compiled" pin names a kernel.

Its fake implementation gives compile the output's shape and layout without running the kernel, and its autograd
(PyTorch's own convolution backward) serves compiled backward graphs. Its kernel is library/functional.py's, given
by `implement`. Eager calls skip the dispatcher: those that need no gradient run the kernel directly, the others go
through functional._EagerConv (the same `backward`). The last argument, `training`, says the call records gradients
(decided as compiled training calls are: torch).

It is defined through torch.library.Library, its kernel a plain function: torch.library.custom_op wraps each call in
Python layers of its own (aliasing checks, an autograd wrapper, a redispatch), host time a compiled graph pays per
call. On the H200's host (torch 2.11, no_grad, a call decided torch) the dispatch took 18.1 us a call this way
against 26.1 through custom_op, the kernel function itself 33.7 (docs/PERFORMANCE.md).
"""

from __future__ import annotations

from typing import Any, Callable, Optional

import torch

_LIB = torch.library.Library("convtune", "DEF")
_LIB.define("conv2d(Tensor input, Tensor weight, Tensor? bias, int[] stride, int[] padding, int[] dilation, "
            "str precision, bool training=False) -> Tensor")
conv2d = torch.ops.convtune.conv2d.default


def implement(kernel: Callable[..., torch.Tensor]) -> None:
    """Make `kernel` (the operator's arguments → its output) what the operator runs, on every device."""
    _LIB.impl("conv2d", kernel, "CompositeExplicitAutograd")


@torch.library.register_fake("convtune::conv2d", lib=_LIB)
def _fake(input: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor], stride: list[int],
          padding: list[int], dilation: list[int], precision: str, training: bool = False) -> torch.Tensor:
    n, _, h, w = input.shape
    c_out, _, kh, kw = weight.shape
    oh = (h + 2 * padding[0] - dilation[0] * (kh - 1) - 1) // stride[0] + 1
    ow = (w + 2 * padding[1] - dilation[1] * (kw - 1) - 1) // stride[1] + 1
    fmt = torch.contiguous_format if input.is_contiguous() else torch.channels_last  # as the kernel lays it out
    return torch.empty((n, c_out, oh, ow), dtype=input.dtype, device=input.device, memory_format=fmt)


def _setup_context(ctx: Any, inputs: tuple[Any, ...], output: torch.Tensor) -> None:
    input, weight, bias, stride, padding, dilation, _, _ = inputs
    ctx.save_for_backward(input, weight)
    ctx.has_bias, ctx.geometry = bias is not None, (stride, padding, dilation)


def backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
    """PyTorch's own convolution backward (cuDNN on a GPU) for input, weight and bias; None for the rest."""
    input, weight = ctx.saved_tensors
    stride, padding, dilation = ctx.geometry
    mask = [ctx.needs_input_grad[0], ctx.needs_input_grad[1], ctx.has_bias and ctx.needs_input_grad[2]]
    gi, gw, gb = torch.ops.aten.convolution_backward(
        grad, input, weight, [weight.shape[0]] if ctx.has_bias else None, stride, padding, dilation, False, [0, 0],
        1, mask)
    return gi, gw, gb if ctx.has_bias else None, None, None, None, None, None


torch.library.register_autograd("convtune::conv2d", backward, setup_context=_setup_context, lib=_LIB)
