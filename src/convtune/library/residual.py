"""A convolution, the batch norm folded into it, the residual add and the ReLU after them, in one kernel.

In torchvision's Bottleneck and BasicBlock the last convolution's batch norm output gets the block's identity added,
then the ReLU: `out = bn3(conv3(out)); out += identity; out = relu(out)`, with the identity the block's input or its
downsample, which the block computes after conv3. Module marks cannot fuse that (the add is in the block's Python), so
`convert(model, example_input, fold_bn_layers=True)` traces each module of the model with torch.fx (its convolutions,
batch norms and ReLUs as single calls) and looks, among its own children, for
conv → batch norm → add(·, r) → torch.nn.ReLU module, where the batch norm takes the convolution's output alone and is
folded into it (library/fold_bn.py), the add takes the batch norm's output and one other value `r` (computed without
the convolution), and the ReLU takes the add's alone. Such a module gets an eval forward that runs its traced graph
with `r` computed first and those four calls replaced by one, `conv_bn_add_relu`:
- where the convolution folds and a kernel wins the fused problem (the convolution with the folded bias, then the
  epilogue `add,relu`: a key ending `-then-add.relu`), the kernel adds `r` and applies the ReLU before its one store;
- anywhere else it calls the modules as the block did: the convolution, the batch norm (passing its input on where it
  folded), the add and the ReLU.
The module's class becomes a subclass of its own (one per class, named as it; `_eval_forward` makes its forward), and the
graph is kept in the instance's `__dict__` (not a submodule: the module tree and the state_dict stay as they were;
copy.deepcopy copies it with the module; pickling, as torch.save does, writes the module as its own class without it).
A forward hook on the convolution, its batch norm or the ReLU (or a global one) keeps the calls on the modules.
Training, calls traced by torch.compile and tracing by torch.fx run the class's own forward, and so does every call
inside `as_written()` (convert's example forward: each convolution is called as a module there, so that its hooks see
its input).
"""

from __future__ import annotations

import contextlib
import copy
import copyreg
import operator
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Optional

import torch
import torch.fx

from convtune.kernels.epilogue import Epilogue
from convtune.library import fold_bn, fused
from convtune.library.call_key import precision_for
from convtune.kernels.torch_conv import cudnn_allows_tf32

CHAIN = ("add", "relu")
TRACED = "_convtune_traced"  # the instance attribute that holds a module's traced graph with its residual tails fused
# whether torch.fx is tracing (is_fx_tracing warns on each call that it says so for torch.export too)
_fx_tracing = getattr(torch.fx._symbolic_trace, "is_fx_symbolic_tracing", None) or \
    (lambda: torch.fx._symbolic_trace._is_fx_tracing_flag)
_ADDS = (operator.add, operator.iadd, torch.add)


@dataclass(frozen=True)
class Tail:
    """One conv → bn → add → ReLU of a module, by its children's names, and the fx nodes of its traced graph."""

    conv: str
    bn: str
    relu: str
    nodes: tuple  # (conv, bn, add, relu, r): the graph's nodes


def tails(module: torch.nn.Module) -> tuple[Optional[torch.fx.Graph], list[Tail]]:
    """`module`'s traced graph (in eval mode, as its eval forward runs) and the conv → bn → add → ReLU links among its
    own children (none where it does not trace)."""
    modes = {m: m.training for m in module.modules()}  # each restored as it was (a frozen batch norm stays in eval)
    try:
        module.eval()
        graph = fold_bn._LeafTracer().trace(module)
    except Exception:  # noqa: BLE001 - fx raises what the module's Python does: such a module keeps its forward
        return None, []
    finally:
        for m, training in modes.items():
            m.training = training
    children = dict(module.named_children())
    found = []
    for conv, bn in fold_bn.folding_links(graph, children):
        add = list(bn.users)[0] if len(bn.users) == 1 else None
        if add is None or add.op != "call_function" or add.target not in _ADDS or len(add.args) != 2 or add.kwargs \
                or add.args.count(bn) != 1:
            continue
        r = add.args[1] if add.args[0] is bn else add.args[0]
        relu = fold_bn._only_user(add)
        if not isinstance(r, torch.fx.Node) or relu is None or relu.target not in children or \
                type(children[relu.target]) not in (torch.nn.ReLU, fused.FusedReLU) or conv in _ancestors(r):
            continue
        found.append(Tail(conv.target, bn.target, relu.target, (conv, bn, add, relu, r)))
    return graph, found


def rewrite(module: torch.nn.Module, graph: torch.fx.Graph, found: list[Tail]) -> None:
    """Give `module` an eval forward that runs `graph` with each of `found` as one conv_bn_add_relu call, `r` first."""
    for t in found:
        conv, bn, add, relu, r = t.nodes
        order = {n: i for i, n in enumerate(graph.nodes)}
        late = sorted((n for n in _ancestors(r) if order[n] > order[conv]), key=order.__getitem__)
        for n in late:  # r's computation moves before the convolution (it does not depend on it)
            conv.prepend(n)
        with graph.inserting_before(conv):
            modules = [graph.get_attr(name) for name in (t.conv, t.bn, t.relu)]
            call = graph.call_function(conv_bn_add_relu, (*modules, conv.args[0], r))
        relu.replace_all_uses_with(call)
        for n in (relu, add, bn, conv):
            graph.erase_node(n)
    graph.lint()
    module.__dict__[TRACED] = torch.fx.GraphModule(module, graph)
    module.__class__ = _fusing_class(type(module))


def _ancestors(node: torch.fx.Node) -> set:
    seen, todo = set(), [node]
    while todo:
        n = todo.pop()
        if n not in seen:
            seen.add(n)
            todo.extend(n.all_input_nodes)
    return seen


def _eval_forward(base: Any) -> Any:
    """The forward of a module with fused residual tails whose class's own forward is `base`: in eval mode its traced
    graph; in training, inside torch.compile and under torch.fx tracing `base`, held in the closure of the subclass's
    forward. Read from the module instead (its class's base through type(self), or a class attribute), it would cost
    dynamo a guard a block on each compiled call (one relating each block's class to the first's, or one that the
    instance's __dict__ does not shadow the attribute); compiling is asked first, so that a traced call reads no
    flag of the module either."""

    def forward(self: torch.nn.Module, *args: Any, **kwargs: Any) -> Any:
        if torch.compiler.is_compiling() or self.training or _as_written or _fx_tracing():
            return base(self, *args, **kwargs)
        return self.__dict__[TRACED](*args, **kwargs)
    return forward


_classes: dict[type, type] = {}
_as_written = False  # set by as_written


@contextlib.contextmanager
def as_written() -> Iterator[None]:
    """Within it, every module with fused residual tails runs its class's own forward."""
    global _as_written
    was, _as_written = _as_written, True
    try:
        yield
    finally:
        _as_written = was


def _fusing_class(cls: type) -> type:
    """A subclass of `cls`, one per class, whose forward is _eval_forward's (a module's class; the traced graph is the
    instance's own, kept outside its submodules, so that its state_dict and module tree stay as they were)."""
    if cls in _classes.values():
        return cls
    sub = _classes.get(cls)
    if sub is None:
        sub = _classes[cls] = type(cls.__name__, (cls,), {"forward": _eval_forward(cls.forward),
                                                          "__module__": cls.__module__,
                                                          "__doc__": cls.__doc__, "__reduce_ex__": _reduce_as_base,
                                                          "__deepcopy__": _deepcopy})
    return sub


def _reduce_as_base(self: torch.nn.Module, protocol: int) -> Any:
    """Pickled (torch.save of the model) as its class's base, without the traced graph: a class made at run time has
    no name to be loaded by. The loaded module runs its own forward (its convolution still folds where convert set that
    up); convert makes it fuse again."""
    state = {k: v for k, v in self.__dict__.items() if k != TRACED}
    return copyreg._reconstructor, (type(self).__mro__[1], object, None), state


def _deepcopy(self: torch.nn.Module, memo: dict) -> Any:
    """copy.deepcopy as for any object: the same class, each attribute copied (the traced graph too, its submodules
    the copy's own through `memo`), not as pickling does."""
    new = type(self).__new__(type(self))
    memo[id(self)] = new
    for k, v in self.__dict__.items():
        new.__dict__[k] = copy.deepcopy(v, memo)
    return new


def _hooked(*modules: torch.nn.Module) -> bool:
    """Whether a forward hook would see any of `modules` called (theirs, or a global one): the fused call calls none of
    them, so such calls go through the modules."""
    glob = torch.nn.modules.module
    return bool(glob._global_forward_hooks or glob._global_forward_pre_hooks) or \
        any(m._forward_hooks or m._forward_pre_hooks for m in modules)


def conv_bn_add_relu(conv: Any, bn: torch.nn.Module, relu: torch.nn.Module, x: torch.Tensor,
                     r: torch.Tensor) -> torch.Tensor:
    """relu(bn(conv(x)) + r): in the kernel where the layer folds and a kernel wins the fused problem (under
    torch.autocast the problem of autocast's dtype, `r` in it too) and no forward hook watches the three modules, else
    by the modules (the batch norm passing its input on where the convolution folded it)."""
    why_torch = getattr(conv, "why_torch", None)  # convtune.nn.Conv2d's (tune_model may hand it torch's class)
    if why_torch is not None and conv._bn is bn and not conv._held and fold_bn.folds(conv, bn, x) and \
            isinstance(r, torch.Tensor) and not (torch.is_grad_enabled() and r.requires_grad) and \
            not _hooked(conv, bn, relu):  # the kernel's output records no gradient for r
        weight, bias = fold_bn.folded_params(conv, bn)
        if torch.is_autocast_enabled(x.device.type):  # what the convolution computes with there, as its forward casts
            x, weight, bias = conv._autocast(x, weight, bias, False)
        if why_torch(x) is None:
            out = fused.conv2d(conv, x, weight, bias, precision_for(cudnn_allows_tf32()), Epilogue(CHAIN, residual=r))
            if out is not None:
                return out
    return relu(bn(conv(x)) + r)


def find(model: torch.nn.Module, folding: dict[str, str]) -> dict[str, tuple[torch.fx.Graph, list[Tail]]]:
    """Per module of `model` (its name) with conv → bn → add → ReLU links among its children whose convolution folds
    that batch norm (`folding`: convolution → batch norm, by their names in `model`, as fold_bn.conv_bn_chains finds
    them): its traced graph and those links. A module that runs a traced graph already (convert ran before) is not
    looked at again."""
    leaves = (torch.nn.Conv2d, torch.nn.BatchNorm2d, torch.nn.ReLU)
    out = {}
    for name, m in model.named_modules():
        if isinstance(m, leaves) or TRACED in m.__dict__ or not any(isinstance(c, torch.nn.Conv2d)
                                                                      for c in m.children()):
            continue
        graph, found = tails(m)
        found = [t for t in found if folding.get(full_name(name, t.conv)) == full_name(name, t.bn)]
        if found:
            out[name] = (graph, found)
    return out


def full_name(module_name: str, child: str) -> str:
    return f"{module_name}.{child}" if module_name else child
