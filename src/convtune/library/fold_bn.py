"""Batch norm folded into the convolution before it, for calls that record no gradients.

In eval mode a BatchNorm2d is a per-channel affine map, y·s + t with s = γ / sqrt(running_var + eps) and
t = β - running_mean·s, so the convolution before it can compute conv(x, w·s) + (b·s + t) and the batch norm's own
pass over the activation goes away. `convert(model, example_input, fold_bn_layers=True)` finds the pairs by tracing
the model with torch.fx (the module tree does not say in which order a block calls its modules), and sets them up
here:
- the convolution (convtune.nn.Conv2d) keeps a reference to its batch norm and, on each call that folds, computes with
  the folded weight and bias, made once in float64 and rounded once to the weight's dtype, and made again when a
  parameter or running statistic changes;
- the batch norm becomes a FoldedBatchNorm2d (a subclass with no state of its own: state_dict, hooks and train()/eval()
  are BatchNorm2d's) whose calls that fold pass their input through;
- a torch.nn.ReLU module that takes the batch norm's output alone becomes a FusedReLU, and the convolution fuses it
  where the pins say a kernel wins the fused problem (library/fused.py);
- a batch norm whose output gets a residual added before a ReLU module has them fused by the module that adds it
  (library/residual.py).

A call folds when the batch norm is in eval mode, no gradient is recorded (grad mode off, or none of the input, the
convolution's and the batch norm's parameters requiring one) and it is not traced by torch.compile. Both modules decide
that alike on each call (`folds`, `passes_through`), so a batch norm is applied exactly once. Training, any call that
records gradients and compiled calls run both modules as torch does: Inductor fuses the batch norm into the pointwise
kernel after the convolution, and folded in the graph, recomputed at each call, ResNet-50 b32 ran 0.905x compiled torch
(NVIDIA H200, float32; 0.940x under bfloat16 autocast). Measured so (docs/PERFORMANCE.md), ResNet-50 b32 with its 53
batch norms folded ran 1.29x eager torch under bfloat16 autocast, and in float32 with the packaged pins 1.03x eager
torch and 0.991x (95 % 0.986-0.997) compiled torch under torch.compile (docs/LIBRARY.md, with two more dynamo guards a
layer than the modules add: docs/PERFORMANCE.md): the graph is torch's, and the modules that stay convtune's add 20
guards to torch's 2887 on 16 Bottlenecks, whatever the depth. Hence convert folds only when asked.
"""

from __future__ import annotations

from collections import Counter
from typing import Any, Optional

import torch
import torch.fx

from convtune.library.fused import FusedReLU


class FoldedBatchNorm2d(torch.nn.BatchNorm2d):
    """A BatchNorm2d folded into the convolution that feeds it (convtune.nn.Conv2d): where that convolution folds, it
    has applied this module already and the input passes through."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if passes_through(self, x):
            return x
        return torch.nn.BatchNorm2d.forward(self, x)  # named, not super(): no guard on a __class__ cell (nn.Conv2d)


def foldable(conv: torch.nn.Module, bn: torch.nn.Module) -> Optional[str]:
    """Why `bn` cannot be folded into `conv` (None: it can)."""
    if type(bn) not in (torch.nn.BatchNorm2d, FoldedBatchNorm2d):
        return f"{type(bn).__name__} is not torch.nn.BatchNorm2d"
    if not bn.track_running_stats or bn.running_mean is None or bn.running_var is None:
        return "the batch norm keeps no running statistics (eval mode normalises by the batch's)"
    if bn.num_features != conv.out_channels:
        return f"the batch norm has {bn.num_features} features for {conv.out_channels} output channels"
    if conv.padding_mode != "zeros":
        return f"padding_mode={conv.padding_mode!r}"
    return None


def _records_gradients(x: torch.Tensor, *params: Optional[torch.Tensor]) -> bool:
    return torch.is_grad_enabled() and (x.requires_grad or any(p is not None and p.requires_grad for p in params))


def _tensors(conv: Any, bn: torch.nn.BatchNorm2d) -> tuple[Optional[torch.Tensor], ...]:
    """The convolution's weight and bias, the batch norm's weight, bias, running mean and running variance, read from
    the modules' own dicts: through Module.__getattr__ a folding call read them 10 times, about 530 of the 825
    __getattr__ calls of a converted ResNet-50 forward (cProfile, H200). A parametrization (weight_norm, ...) moves a
    parameter out of those dicts: its attribute then computes it."""
    cp, bp, bb = conv._parameters, bn._parameters, bn._buffers
    try:
        return cp["weight"], cp["bias"], bp["weight"], bp["bias"], bb["running_mean"], bb["running_var"]
    except KeyError:
        return conv.weight, conv.bias, bn.weight, bn.bias, bn.running_mean, bn.running_var


def folds(conv: Any, bn: torch.nn.BatchNorm2d, x: torch.Tensor) -> bool:
    """Whether `conv`'s call on `x` computes with the folded weight and bias (and `bn` then passes its input on)."""
    if torch.compiler.is_compiling() or bn.training:
        return False
    if not torch.is_grad_enabled():
        return True
    w, b, bw, bb, _, _ = _tensors(conv, bn)
    return not _records_gradients(x, w, b, bw, bb)


def passes_through(bn: torch.nn.BatchNorm2d, y: torch.Tensor) -> bool:
    """The batch norm's side of `folds`: its input `y` is the folding convolution's output, which records no gradient
    exactly when the convolution's call recorded none."""
    # compiling first: a traced call reads nothing of the module here, and so adds no guard on it
    return not torch.compiler.is_compiling() and not bn.training and not _records_gradients(y, bn.weight, bn.bias)


def _versions(tensors: tuple[Optional[torch.Tensor], ...], eps: float) -> tuple:
    key: list = [eps]
    for t in tensors:
        key += (None, None) if t is None else (id(t), t._version)
    return tuple(key)


def folded(weight: torch.Tensor, bias: Optional[torch.Tensor], bn: torch.nn.BatchNorm2d) -> tuple[torch.Tensor,
                                                                                                     torch.Tensor]:
    """The weight and bias of conv followed by `bn` in eval mode, computed in float64 and rounded once to `weight`'s
    dtype."""
    with torch.no_grad():
        s = bn.running_var.double().add(bn.eps).rsqrt()
        if bn.weight is not None:
            s = s * bn.weight.double()
        t = -bn.running_mean.double() * s
        if bn.bias is not None:
            t = t + bn.bias.double()
        if bias is not None:
            t = t + bias.double() * s
        w = weight.double() * s.reshape(-1, *([1] * (weight.dim() - 1)))
        return w.to(weight.dtype), t.to(weight.dtype)


def folded_params(conv: Any, bn: torch.nn.BatchNorm2d) -> tuple[torch.Tensor, torch.Tensor]:
    """`folded` for `conv`, kept on it until a parameter or running statistic changes."""
    tensors = _tensors(conv, bn)
    key = _versions(tensors, bn.eps)
    memo = conv.__dict__.get("_folded")
    if memo is None or memo[0] != key:
        memo = (key,) + folded(tensors[0], tensors[1], bn)  # type: ignore[arg-type]
        conv.__dict__["_folded"] = memo
    return memo[1], memo[2]


class _LeafTracer(torch.fx.Tracer):
    """Traces a model down to its convolutions, batch norms and ReLU modules (convtune's included) as single calls."""

    def is_leaf_module(self, m: torch.nn.Module, qualname: str) -> bool:
        return isinstance(m, (torch.nn.Conv2d, torch.nn.BatchNorm2d, torch.nn.ReLU)) or \
            super().is_leaf_module(m, qualname)


def _only_user(node: torch.fx.Node) -> Optional[torch.fx.Node]:
    """The one module call that takes `node`'s value as its only argument, if that is all that uses it."""
    users = list(node.users)
    if len(users) != 1 or users[0].op != "call_module" or users[0].args != (node,) or users[0].kwargs:
        return None
    return users[0]


def folding_links(graph: torch.fx.Graph, modules: dict[str, torch.nn.Module]) -> list[tuple[torch.fx.Node,
                                                                                           torch.fx.Node]]:
    """The (convolution, batch norm) call nodes of `graph` where the batch norm's only input is the convolution's
    output, that output goes nowhere else, each of the two is called once and the batch norm can be folded; `modules`
    names the modules as the graph's call targets do."""
    calls = Counter(node.target for node in graph.nodes if node.op == "call_module")
    links = []
    for node in graph.nodes:
        if node.op != "call_module" or not isinstance(modules.get(node.target), torch.nn.Conv2d):
            continue
        bn = _only_user(node)
        if bn is None or bn.target not in modules or calls[node.target] != 1 or calls[bn.target] != 1 or \
                foldable(modules[node.target], modules[bn.target]) is not None:
            continue
        links.append((node, bn))
    return links


def conv_bn_chains(model: torch.nn.Module) -> tuple[list[tuple[str, str, Optional[str]]], Optional[str]]:
    """The (convolution, batch norm, ReLU or None) module names where the batch norm's only input is the
    convolution's output, the convolution's output goes nowhere else, and each of the two is called once; the ReLU
    module (torch.nn.ReLU, called anywhere else too) where it takes the batch norm's output and nothing else does
    (library/fused.py fuses it). And why none were looked for (the model does not trace with torch.fx), or None."""
    try:
        graph = _LeafTracer().trace(model)
    except Exception as e:  # fx raises what the model's Python does: control flow on values, unsupported calls
        return [], f"not traced by torch.fx ({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''})"
    modules = dict(model.named_modules())
    chains = []
    for node, bn in folding_links(graph, modules):
        relu = _only_user(bn)
        relu_name = relu.target if relu is not None and type(modules.get(relu.target)) in (torch.nn.ReLU, FusedReLU) \
            else None
        chains.append((node.target, bn.target, relu_name))
    return chains, None

