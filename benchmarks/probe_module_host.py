"""Where convtune.nn.Conv2d's forward spends host time on layers pinned to torch, inside a real model: the
converted ResNet-50 in train mode (batch 32 by default, where the step is host-bound), its convolutions taking
turns as torch.nn.Conv2d, convtune.nn.Conv2d and stripped-down variants of convtune's forward defined here,
each timed on the host from the call of the model until its forward returns (then backward and a synchronize,
untimed). Each variant keeps its decision under its own key (after the first turn every call hits it). Median per turn of each variant's forward time minus torch's, per convolution call.

    python benchmarks/probe_module_host.py [--batch 32] [--turns 200]     (GPU, torchvision)
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch
import torch.nn.functional as F

import convtune
from convtune import functional


class SigGetDevice(convtune.nn.Conv2d):
    """convtune's forward with x.get_device() (an int) in the signature instead of x.device."""

    _probe_SigGetDevice = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        params = self._parameters
        weight, bias = params["weight"], params["bias"]
        tf32 = torch._C._get_cudnn_allow_tf32()
        training = torch.is_grad_enabled() and (x.requires_grad or weight.requires_grad)
        sig = (x.shape, x.dtype, x.get_device(), functional.pins_generation, tf32, training)
        if sig == self._probe_SigGetDevice:
            return F.conv2d(x, weight, bias, self.stride, self.padding, self.dilation, 1)
        self.__dict__["_probe_SigGetDevice"] = sig
        return F.conv2d(x, weight, bias, self.stride, self.padding, self.dilation, 1)


class SigDevice(SigGetDevice):
    """The same with x.device, as convtune's forward does (no compile check, no bound check)."""

    _probe_SigDevice = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        params = self._parameters
        weight, bias = params["weight"], params["bias"]
        tf32 = torch._C._get_cudnn_allow_tf32()
        training = torch.is_grad_enabled() and (x.requires_grad or weight.requires_grad)
        sig = (x.shape, x.dtype, x.device, functional.pins_generation, tf32, training)
        if sig == self._probe_SigDevice:
            return F.conv2d(x, weight, bias, self.stride, self.padding, self.dilation, 1)
        self.__dict__["_probe_SigDevice"] = sig
        return F.conv2d(x, weight, bias, self.stride, self.padding, self.dilation, 1)


class ShapeOnly(SigGetDevice):
    """Only the input's shape checked."""

    _probe_ShapeOnly = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        params = self._parameters
        weight, bias = params["weight"], params["bias"]
        if x.shape == self._probe_ShapeOnly:
            return F.conv2d(x, weight, bias, self.stride, self.padding, self.dilation, 1)
        self.__dict__["_probe_ShapeOnly"] = x.shape
        return F.conv2d(x, weight, bias, self.stride, self.padding, self.dilation, 1)


class NoCheck(SigGetDevice):
    """No check at all: the parameters read from _parameters, then F.conv2d (the floor)."""

    _probe_NoCheck = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        params = self._parameters
        return F.conv2d(x, params["weight"], params["bias"], self.stride, self.padding, self.dilation, 1)


class IsCompiling(NoCheck):
    """NoCheck plus torch.compiler.is_compiling()."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if torch.compiler.is_compiling():
            raise AssertionError
        params = self._parameters
        return F.conv2d(x, params["weight"], params["bias"], self.stride, self.padding, self.dilation, 1)


class ShapeGrad(SigGetDevice):
    """The input's shape and grad mode checked."""

    _probe_ShapeGrad = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if torch.compiler.is_compiling():
            raise AssertionError
        params = self._parameters
        weight, bias = params["weight"], params["bias"]
        t = self._probe_ShapeGrad
        if t is not None and t[0] == x.shape and t[1] is torch.is_grad_enabled():
            return F.conv2d(x, weight, bias, self.stride, self.padding, self.dilation, 1)
        self.__dict__["_probe_ShapeGrad"] = (x.shape, torch.is_grad_enabled())
        return F.conv2d(x, weight, bias, self.stride, self.padding, self.dilation, 1)


class ShapeGradGeometry(SigGetDevice):
    """The input's shape and grad mode checked, the layer's geometry kept in the same tuple."""

    _probe_ShapeGradGeometry = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if torch.compiler.is_compiling():
            raise AssertionError
        params = self._parameters
        t = self._probe_ShapeGradGeometry
        if t is not None and t[0] == x.shape and t[1] is torch.is_grad_enabled():
            return F.conv2d(x, params["weight"], params["bias"], t[2], t[3], t[4], 1)
        self.__dict__["_probe_ShapeGradGeometry"] = (x.shape, torch.is_grad_enabled(), self.stride, self.padding,
                                             self.dilation)
        return F.conv2d(x, params["weight"], params["bias"], self.stride, self.padding, self.dilation, 1)


class NumelGrad(SigGetDevice):
    """The input's numel and grad mode checked."""

    _probe_NumelGrad = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if torch.compiler.is_compiling():
            raise AssertionError
        params = self._parameters
        weight, bias = params["weight"], params["bias"]
        t = self._probe_NumelGrad
        if t is not None and t[0] == x.numel() and t[1] is torch.is_grad_enabled():
            return F.conv2d(x, weight, bias, self.stride, self.padding, self.dilation, 1)
        self.__dict__["_probe_NumelGrad"] = (x.numel(), torch.is_grad_enabled())
        return F.conv2d(x, weight, bias, self.stride, self.padding, self.dilation, 1)



def main() -> None:
    import torchvision

    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--turns", type=int, default=200)
    a = ap.parse_args()
    torch.manual_seed(0)
    model = torchvision.models.resnet50(weights=None).cuda()
    x = torch.randn(a.batch, 3, 224, 224, device="cuda")
    convtune.nn.convert(model, example_input=x, leave_torch_layers=False)  # every layer swapped: they take turns
    model.train()
    convs = [m for m in model.modules() if isinstance(m, convtune.nn.Conv2d)]
    stem = model.conv1
    target = torch.randint(0, 1000, (a.batch,), device="cuda")
    variants = {"torch": torch.nn.Conv2d, "convtune": convtune.nn.Conv2d, "sig x.device": SigDevice,
                "sig x.get_device()": SigGetDevice, "shape only": ShapeOnly, "shape+grad": ShapeGrad,
                "shape+grad, geometry": ShapeGradGeometry, "numel+grad": NumelGrad, "no check": NoCheck,
                "is_compiling only": IsCompiling}

    def step(cls: type) -> float:
        for m in convs:
            object.__setattr__(m, "__class__", cls if m is not stem else torch.nn.Conv2d)  # the stem: torch always
        t0 = time.perf_counter()
        out = model(x)
        t = time.perf_counter() - t0
        F.cross_entropy(out, target).backward()
        model.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        return t

    names = list(variants)
    for k in names * 3:
        step(variants[k])
    got: dict[str, list[float]] = {k: [] for k in names}
    for i in range(a.turns):
        order = names[i % len(names):] + names[:i % len(names)]
        if (i // len(names)) % 2:
            order = order[::-1]
        for k in order:
            got[k].append(step(variants[k]))
    n = len(convs) - 1
    print(f"{torch.cuda.get_device_name()} · ResNet-50 train forward, batch {a.batch}, {a.turns} turns; {n} convolutions "
          f"take each class (the stem stays torch's)")
    print(f"  torch: forward issued in {statistics.median(got['torch']) * 1e3:.3f} ms (median)")
    for k in names[1:]:
        d = statistics.median((u - v) * 1e6 for u, v in zip(got[k], got["torch"]))
        print(f"  {k:<20} {d:+7.1f} us per forward, {d / n:+.2f} us per convolution call")


if __name__ == "__main__":
    main()
