"""A convolution, the batch norm folded into it and the ReLU after them, in one kernel.

`convert(model, example_input, fold_bn_layers=True)` finds by torch.fx each convolution → batch norm → torch.nn.ReLU
module whose links go nowhere else (library/fold_bn.py). Such a layer's eager calls that fold ask the pins for the fused
problem: the convolution with the folded bias, then the epilogue `relu` (a key ending `-then-relu`). Where a kernel
wins it (a pin, a verified family pin, or tuning on first use, as for any call: library/dispatch.py), the kernel
applies the ReLU before its one store and marks its output, and the ReLU module (a FusedReLU, which is a
torch.nn.ReLU) hands a marked input on. Anywhere else the layer computes the folded convolution alone and the ReLU runs
as torch's. A ReLU module called at several places (torchvision's blocks call one three times) is skipped only for
the marked outputs.
"""

from __future__ import annotations

from typing import Any, Optional

import torch

from convtune import pins
from convtune.errors import UnsupportedProblem
from convtune.kernels import get_variant
from convtune.kernels.conv_args import dtype_name
from convtune.kernels.epilogue import Epilogue
from convtune.kernels.runner import WeightCache
from convtune.library import dispatch, functional
from convtune.library.call_key import output_format
from convtune.problem import for_dtype

RELU = Epilogue(("relu",))
MARK = "_convtune_relu_applied"  # set on a fused call's output: the ReLU after it has been applied

# a call's signature → (variant, plan) of the kernel that fuses it, or pins.TORCH; dropped with dispatch's decisions
_plans: dict[tuple, Any] = {}
dispatch.on_forget.append(_plans.clear)
# the kernels read an NCHW-contiguous weight: a channels_last model's folded weight is channels_last (its copy is made
# once per weight tensor and version)
_contiguous = WeightCache()


class FusedReLU(torch.nn.ReLU):
    """torch.nn.ReLU, but an input a fused convolution marked (it applied the ReLU already) is handed on."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # compiling first: a traced call reads nothing of the tensor here (nothing is fused under torch.compile)
        if not torch.compiler.is_compiling() and x.__dict__.get(MARK, False):
            return x
        return torch.nn.ReLU.forward(self, x)  # named, not super(): no guard on a __class__ cell (nn.Conv2d)


def decision(conv: Any, x: torch.Tensor, weight: torch.Tensor, precision: str,
             chain: tuple[str, ...] = RELU.chain) -> dispatch.Decision:
    """What the pins run for `conv`'s folded call on `x` (the folded `weight`, a bias) with the epilogue `chain`
    (`relu`, or `add,relu` after a residual: library/residual.py)."""
    return functional.decision(x, weight, True, conv.stride, conv.padding, conv.dilation,
                               for_dtype(precision, dtype_name(x)), epilogue=chain)


def conv2d(conv: Any, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, precision: str,
           epilogue: Epilogue = RELU) -> Optional[torch.Tensor]:
    """The folded call of `conv` with `epilogue` in the kernel; None where the fused problem runs torch (the caller then
    computes the convolution alone, and the ops after it run as torch's). An output of the ReLU alone is marked, for the
    ReLU module after it (FusedReLU)."""
    if not weight.is_contiguous():
        weight = _contiguous.get(weight, (), torch.Tensor.contiguous)
    sig = (x.shape, x.stride(), x.dtype, x.device, weight.shape, weight.dtype, conv.stride, conv.padding, conv.dilation,
           precision, dispatch.generation, epilogue.chain)
    hit = _plans.get(sig)
    if hit is None:
        hit = _plans[sig] = _plan(conv, x, weight, bias, precision, epilogue)
    if hit is pins.TORCH:
        return None
    host, plan, fmt, shape = hit
    r = epilogue.residual
    if r is not None and (r.shape != shape or r.dtype != x.dtype or r.device != x.device):  # a broadcast add: torch's
        return None
    out = torch.empty(shape, device=x.device, dtype=x.dtype, memory_format=fmt)
    host.run(plan, host.kernel_input(x, plan), weight, bias, out, epilogue)
    if epilogue is RELU:
        out.__dict__[MARK] = True
    return out


def _plan(conv: Any, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, precision: str,
          epilogue: Epilogue) -> Any:
    value = decision(conv, x, weight, precision, epilogue.chain).value
    if value == pins.TORCH:
        return pins.TORCH
    variant = get_variant(value.kernel)
    if variant.library is None or not variant.fuses(epilogue.chain):  # a hand-written pin: it cannot run the chain
        raise UnsupportedProblem(f"{value.kernel} does not fuse {','.join(epilogue.chain)}; pin the fused call to "
                                 "another kernel or torch")
    fmt = output_format(x, weight)
    out = torch.empty(_out_shape(conv, x, weight), device=x.device, dtype=x.dtype, memory_format=fmt)
    # planned for the chain, whatever this call's residual is: conv2d checks each call's against the output
    planned = Epilogue(epilogue.chain, epilogue.vectors, out if epilogue.residual is not None else None)
    plan, _ = variant.library.checked_plan(x, weight, bias, conv.stride, conv.padding, conv.dilation, value.meta,
                                           for_dtype(precision, dtype_name(x)), out, 1, planned)
    return variant.library, plan, fmt, tuple(out.shape)


def _out_shape(conv: Any, x: torch.Tensor, weight: torch.Tensor) -> tuple[int, int, int, int]:
    from convtune.kernels.conv_args import geometry

    g = geometry(x, weight, conv.stride, conv.padding, conv.dilation)
    return (g.n, g.c_out, g.oh, g.ow)
