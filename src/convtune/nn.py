"""`convtune.nn.Conv2d`: a drop-in for torch.nn.Conv2d (same constructor, parameters and state_dict) that runs
convtune's pinned Triton kernel on the CUDA tensors it supports and torch's own convolution elsewhere;
`convtune.nn.convert(model)` swaps a model's convolutions in place and reports what each will run."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

import torch

from convtune.errors import UnsupportedProblem
from convtune.functional import conv2d, default_precision, lookup


class Conv2d(torch.nn.Conv2d):
    def why_torch(self, x: Optional[torch.Tensor] = None) -> Optional[str]:
        """Why this layer runs torch's convolution (for the input `x`, if given); None when it runs ours."""
        if self.groups != 1:
            return f"groups={self.groups} (the kernel takes groups=1)"
        if self.padding_mode != "zeros":
            return f"padding_mode={self.padding_mode!r} (the kernel pads with zeros)"
        if isinstance(self.padding, str):
            return f"padding={self.padding!r} (the kernel takes numbers)"
        if self.weight.dtype != torch.float32:
            return f"weight is {self.weight.dtype} (the kernel takes float32)"
        if x is not None:
            if not x.is_cuda:
                return f"input on {x.device} (the kernel runs on CUDA tensors)"
            if x.dtype != torch.float32:
                return f"input is {x.dtype} (the kernel takes float32)"
            if x.dim() != 4:
                return f"{x.dim()}-d input (the kernel takes a batch, N×C×H×W)"
        return None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.why_torch(x) is None:
            return conv2d(x, self.weight, self.bias, self.stride, self.padding, self.dilation)
        return super().forward(x)


@dataclass
class Swap:
    """One convolution of a converted model and what it runs."""
    name: str
    layer: str
    runs: str


class Report(list):
    """convert's answer: a Swap per convolution; str() is a table."""

    def __str__(self) -> str:
        width = max([len(s.name) for s in self] + [5])
        lines = [f"{'layer':<{width}}  runs", f"{'-' * width}  ----"]
        lines += [f"{s.name:<{width}}  {s.runs}   [{s.layer}]" for s in self]
        ours, torch_ = (sum(s.runs.startswith(w) for s in self) for w in ("convtune", "torch"))
        idle = len(self) - ours - torch_
        return "\n".join(lines + [f"{len(self)} convolution(s) swapped: {ours} run convtune's kernel, {torch_} "
                                  f"torch's" + (f", {idle} not called by the example input" if idle else "")])


def convert(model: torch.nn.Module, example_input: Any = None) -> Report:
    """Make every torch.nn.Conv2d of `model` a convtune.nn.Conv2d, in place (parameters, buffers and hooks
    stay as they are; subclasses of nn.Conv2d are left alone). Returns the report: per convolution, whether
    it runs convtune's kernel (and, given `example_input` to run the model once without gradients, the
    configuration for that input's shape and where it comes from) or torch's convolution, and why. The example
    forward runs in eval mode and leaves the model as it was (running statistics, train/eval flags)."""
    swapped = []
    for name, module in model.named_modules():
        if type(module) is torch.nn.Conv2d:
            module.__class__ = Conv2d  # a subclass with no state of its own: nothing else to move
        if isinstance(module, Conv2d):
            swapped.append((name, module))
    seen: dict[str, torch.Tensor] = {}
    if example_input is not None:
        def keep(name: str) -> Any:
            def hook(m: torch.nn.Module, args: tuple[Any, ...]) -> None:  # None: the input goes on unchanged
                seen.setdefault(name, args[0])
            return hook
        hooks = [m.register_forward_pre_hook(keep(name)) for name, m in swapped]
        modes = {m: m.training for m in model.modules()}
        try:
            # eval mode: a train-mode forward moves BatchNorm's running statistics (on the H200 a converted
            # ResNet-50 then gave other outputs, rel L2 0.94); no_grad: nothing for autograd to keep
            model.eval()
            with torch.no_grad():
                model(example_input)
        finally:
            for h in hooks:
                h.remove()
            for m, training in modes.items():
                m.training = training
    return Report(Swap(name, repr(m), _runs(m, seen.get(name), example_input is not None)) for name, m in swapped)


def _runs(m: Conv2d, x: Optional[torch.Tensor], ran: bool) -> str:
    why = m.why_torch(x)
    if why is not None:
        return f"torch: {why}"
    if x is None:
        return "not called by the example input" if ran else "convtune (configuration per input shape: pins)"
    try:
        meta, source = lookup(x, m.weight, m.bias is not None, m.stride, m.padding, m.dilation, default_precision())
    except UnsupportedProblem as e:
        return f"torch: {e}"
    return f"convtune implicit_gemm {meta.short()} ({source})"
