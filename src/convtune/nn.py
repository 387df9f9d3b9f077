"""`convtune.nn.Conv2d`: a drop-in for torch.nn.Conv2d (same constructor, parameters and state_dict) that
runs convtune's pinned Triton kernel on CUDA tensors it supports and torch's own convolution elsewhere."""

from __future__ import annotations

import torch

from convtune.functional import conv2d


class Conv2d(torch.nn.Conv2d):
    def _kernel_applies(self, x: torch.Tensor) -> bool:
        return (x.is_cuda and x.dtype == torch.float32 and self.groups == 1 and self.padding_mode == "zeros"
                and not isinstance(self.padding, str))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self._kernel_applies(x):
            return conv2d(x.contiguous(), self.weight.contiguous(), self.bias, self.stride, self.padding,
                          self.dilation)
        return super().forward(x)
