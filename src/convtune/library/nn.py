"""`convtune.nn.Conv2d`: a drop-in for torch.nn.Conv2d (same constructor, parameters and state_dict) that runs
what the pins say on the CUDA tensors the kernel supports (convtune's Triton kernel with the pinned
configuration, or torch's convolution where a pin says torch won) and torch's own convolution elsewhere;
`convtune.nn.convert(model)` swaps a model's convolutions in place, folds the batch norms that follow them where
asked to (library/fold_bn.py) and reports what each will run; `convtune.nn.graphed(model)` replays its forwards without
gradients from CUDA graphs (library/graphed.py)."""

from __future__ import annotations

import os
import weakref
from typing import Any, Optional

import torch
import torch.nn.functional as F

from convtune.library import call_key, fold_bn, functional, fused, residual
from convtune.library.report import Report, Swap, fused_runs_of, has_bias, runs_of
from convtune.library import dispatch
from convtune.library.functional import conv2d
from convtune.library import graphed as _graphed
from convtune.pins import TORCH
from convtune.kernels.conv_args import dtype_name
from convtune.kernels.torch_conv import cudnn_allows_tf32
from convtune.problem import ConvProblem

Graphed, graphed = _graphed.Graphed, _graphed.graphed  # convtune.nn.graphed(model)


class Conv2d(torch.nn.Conv2d):
    # The last input signature the pins sent to torch: the next call with it goes straight to torch's
    # convolution. Dropped, with _bound, whenever a layer attribute is set (stride, padding, padding_mode, ...,
    # and train()/eval()), so the shortcut may call F.conv2d with the layer's geometry directly.
    _torch_for: Any = None
    # The last signature that runs our kernel, bound (functional.Bound): a call that matches it launches the
    # bound binary directly, skipping the pin lookup, the plan cache and Triton's argument binding.
    _bound: Optional[functional.Bound] = None
    # The last signature that runs our kernel on the full path (a kernel with no bound launch, or a layout that has
    # none): the next call with it skips the pin lookup and the attempt to bind, and goes to kernel_conv2d, which
    # finds its plan in the plan cache.
    _kernel_for: Any = None
    # Under torch.autocast, outside autograd: (weight, bias, (dtype, their versions)) → the weight and bias cast to that
    # dtype, kept so that a layer's calls reuse one cast (as autocast's own cast cache does for leaf parameters), and
    # with it the bound launch and the kernels' packed weights; the tensors are told apart by identity
    _cast: Any = None
    # Set by convert (in the instance's __dict__, so that it is no submodule: the state_dict keeps its keys): the batch
    # norm this layer's calls that record no gradients fold in (library/fold_bn.py)
    _bn: Optional[torch.nn.BatchNorm2d] = None
    # Set by convert with _bn where a torch.nn.ReLU takes the batch norm's output alone: its calls that fold run the
    # ReLU in the kernel where the pins say a kernel wins the fused problem (library/fused.py)
    _fuses_relu: bool = False
    # Set by convert with _bn where the batch norm's output gets a residual added, then a ReLU: its module's eval
    # forward calls it through residual.conv_bn_add_relu (library/residual.py)
    _fuses_residual: bool = False
    # Set by hold_torch: every call runs torch's convolution (with the folded weight and bias where the layer folds)
    _held: bool = False

    _MEMOS = ("_bound", "_torch_for", "_kernel_for", "_cast")

    def __setattr__(self, name: str, value: Any) -> None:
        if name not in self._MEMOS:  # stride, padding, groups, ... changed: decide again
            self.forget_calls()
        super().__setattr__(name, value)

    def forget_calls(self) -> None:
        """Drop what this layer remembers of its calls (the bound launch holds a compiled binary: a copy of the model
        for torch.compile has no use for it); its next call decides again."""
        for memo in self._MEMOS:
            self.__dict__.pop(memo, None)

    def hold_torch(self, held: bool) -> None:
        """Run torch's convolution for every call while `held`, whatever the pins say, keeping what the layer
        remembers of its calls and the batch norm it folds: tune_model.py times the model without a layer's kernel so,
        where handing the layer back to torch.nn.Conv2d would leave its folded batch norm unapplied."""
        self.__dict__["_held"] = bool(held)  # not through __setattr__, which drops the remembered calls

    def why_torch(self, x: Optional[torch.Tensor] = None) -> Optional[str]:
        """Why this layer runs torch's convolution (for the input `x`, if given); None when it may run ours
        (what it runs then is up to the pins: convtune.conv2d)."""
        why = _why_layer(self)
        if why is None and x is not None:
            why = _why_input(x) if x.is_cuda or os.environ.get("TRITON_INTERPRET") == "1" else \
                f"input on {x.device} (the kernels run on CUDA tensors, or on the CPU under TRITON_INTERPRET=1)"
        return why

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if torch.compiler.is_compiling():  # traced: conv2d decides as it is traced (TracedAsTorch: convert decided)
            # torch's forward named, not super(): dynamo guards super()'s __class__ cell for every layer, on every call
            # (48 layers of a CPU model: 339.7 us a compiled call against torch's 332.0; named, 332.2 against 332.9)
            return conv2d(x, self.weight, self.bias, self.stride, self.padding, self.dilation) \
                if self.why_torch(x) is None else torch.nn.Conv2d.forward(self, x)
        # torch.nn.Conv2d's forward reads self.weight and self.bias through Module.__getattr__ (0.45 us each on
        # a dev CPU against 0.03 us for a dict read); reading them from _parameters pays for part of the checks
        # below. On the H200's host the checks still cost ~3 us a call over torch's, 1 % of a batch-32 ResNet-50
        # train step (benchmarks/train_step_ab.py; a cProfile of the module's forward): convert(model, example_input) leaves
        # such layers as torch.nn.Conv2d.
        params = self._parameters
        if type(self) in _OWN_CLASSES and "weight" in params and "bias" in params:
            weight, bias = params["weight"], params["bias"]
        else:  # a subclass, or weight_norm and the like moved a parameter: ordinary attribute lookup
            weight, bias = self.weight, self.bias
        bn = self._bn
        folds = bn is not None and fold_bn.folds(self, bn, x)
        if folds:
            weight, bias = fold_bn.folded_params(self, bn)
        tf32 = cudnn_allows_tf32()
        training = torch.is_grad_enabled() and (  # records gradients (functional.records_gradients), inlined
            x.requires_grad or weight.requires_grad or (bias is not None and bias.requires_grad))
        if torch.is_autocast_enabled(x.device.type):  # what torch's convolution computes with there
            x, weight, bias = self._autocast(x, weight, bias, training)
        if self._held:
            return self._conv_forward(x, weight, bias)
        precision = call_key.precision_for(tf32)
        if folds and self._fuses_relu and self.why_torch(x) is None:
            out = fused.conv2d(self, x, weight, bias, precision)  # type: ignore[arg-type]
            if out is not None:  # the ReLU ran in the kernel
                return out
        bound = self._bound
        if bound is not None and bound.training is training and bound.matches(x, weight, bias, precision):
            return bound(x, weight, bias)
        # bias presence too: a layer that folds a batch norm calls with a bias, and without one where it does not fold
        sig = (x.shape, x.dtype, x.device, dispatch.generation, tf32, training, bias is None)
        if sig == self._torch_for:
            return F.conv2d(x, weight, bias, self.stride, self.padding, self.dilation, 1)
        kernel_sig = sig + (x.is_contiguous(), weight.dtype, None if bias is None else bias.dtype)
        if kernel_sig == self._kernel_for:
            return functional.kernel_conv2d(x, weight, bias, self.stride, self.padding, self.dilation, 1, precision)
        if self.why_torch(x) is None:
            if not functional.pinned_to_torch(x, weight, bias, self.stride, self.padding, self.dilation, precision,
                                              training=training):
                bound = self._bound = functional.bind(x, weight, bias, self.stride, self.padding, self.dilation,
                                                      precision, training)
                if bound is not None:
                    return bound(x, weight, bias)
                out = functional.kernel_conv2d(x, weight, bias, self.stride, self.padding, self.dilation, 1,
                                               precision)
                self._kernel_for = kernel_sig  # after the call: one that raised leaves no shortcut
                return out
            self._torch_for = sig
        return self._conv_forward(x, weight, bias)

    def _autocast(self, x: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor],
                  training: bool) -> tuple[torch.Tensor, torch.Tensor, Optional[torch.Tensor]]:
        """call_key.autocast_args, with the parameters' cast kept between calls that record no gradients."""
        if training:
            return call_key.autocast_args(x, weight, bias)
        dt = torch.get_autocast_dtype(x.device.type)
        versions = (dt, weight._version, None if bias is None else bias._version)
        cast = self._cast
        if cast is None or cast[0] is not weight or cast[1] is not bias or cast[2] != versions:
            cast = self._cast = (weight, bias, versions) + call_key.autocast_args(x[:0], weight, bias)[1:]
        return x.to(dt) if x.is_floating_point() and x.dtype is not dt else x, cast[3], cast[4]


class TracedAsTorch(Conv2d):
    """A convtune.nn.Conv2d whose calls inside torch.compile run torch, as convert decided from its example forward (no
    "+compiled" pin names a kernel for that input): traced, its forward is torch.nn.Conv2d's and the graph is torch's,
    whether or not the traced call could be decided (functional._SIZES_TELL: before torch 2.13 it keeps the operator; a
    bfloat16 autocast AlexNet on the H200, torch 2.11, ran 0.73x compiled torch with its three eagerly pinned layers
    so). The decision is the layer's class, which dynamo guards for every module anyway; an attribute holding it would
    cost two guards a layer on each compiled call. When the pins change (dispatch.forget) every such layer, copies and
    loaded ones too, becomes a Conv2d again, and its compiled calls are decided as they are traced. Eager calls are
    Conv2d's, one Python call deeper: about 150 ns a call on a 2-core CPU (timeit), 8 us of a converted ResNet-50's
    4.2-5.8 ms of host time a forward (docs/PERFORMANCE.md)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if torch.compiler.is_compiling():
            return torch.nn.Conv2d.forward(self, x)
        return Conv2d.forward(self, x)

    def __setstate__(self, state: dict) -> None:  # copy.deepcopy and pickle: the copy is such a layer too
        super().__setstate__(state)
        _traced_as_torch.add(self)

    def _get_name(self) -> str:  # the module's repr: a Conv2d
        return "Conv2d"


_OWN_CLASSES = (Conv2d, TracedAsTorch)  # the classes whose weight and bias are the layer's own parameters
_traced_as_torch: "weakref.WeakSet[TracedAsTorch]" = weakref.WeakSet()


def _decided_again() -> None:
    """dispatch.forget: the pins changed, so no layer keeps convert's compiled decision."""
    for m in list(_traced_as_torch):
        if type(m) is TracedAsTorch:
            object.__setattr__(m, "__class__", Conv2d)  # not through __setattr__: the eager shortcuts check generation
    _traced_as_torch.clear()


dispatch.on_forget.append(_decided_again)


def _why_layer(m: torch.nn.Conv2d) -> Optional[str]:
    if m.groups != 1:
        return f"groups={m.groups} (the kernel takes groups=1)"
    if m.padding_mode != "zeros":
        return f"padding_mode={m.padding_mode!r} (the kernel pads with zeros)"
    if isinstance(m.padding, str):
        return f"padding={m.padding!r} (the kernel takes numbers)"
    if m.weight.dtype not in call_key.TAKEN_DTYPES:
        return f"weight is {m.weight.dtype} (the kernels take float32, bfloat16 and float16)"
    return None


def _why_input(x: torch.Tensor) -> Optional[str]:
    if x.dtype not in call_key.TAKEN_DTYPES:
        return f"input is {x.dtype} (the kernels take float32, bfloat16 and float16)"
    if x.dtype is torch.bfloat16 and not x.is_cuda:
        return call_key.BF16_ON_CPU
    if x.dim() != 4:
        return f"{x.dim()}-d input (the kernel takes a batch, N×C×H×W)"
    return None


def convert(model: torch.nn.Module, example_input: Any = None, *,
            leave_torch_layers: Optional[bool] = None, fold_bn_layers: bool = False) -> Report:
    """Make the torch.nn.Conv2d layers of `model` convtune.nn.Conv2d, in place (parameters, buffers and hooks
    stay as they are; subclasses of nn.Conv2d are left alone): all of them, or with an `example_input` all but
    those that run torch for it (`leave_torch_layers`, below). Returns the report: per convolution, whether
    it runs convtune's kernel (and, given `example_input` to run the model once without gradients, the
    configuration for that input's shape and where it comes from) or torch's convolution, and why (the kernel
    cannot take it, or a pin says torch is faster for that shape), and what its training calls run where a
    "+train" pin decides them differently. The example forward runs in eval mode and leaves the model as it
    was (running statistics, train/eval flags).

    `leave_torch_layers` (on by default when there is an `example_input`, which it needs; False swaps every
    convolution whatever it runs): a layer that runs torch for the input it first sees there,
    in calls without gradients and in training calls alike (a CUDA input, so that the pins decide; or a layer
    the kernel cannot take at all), goes back to torch.nn.Conv2d, so that it costs
    no host time over torch's at all (convtune's module checks each call's signature: about 3 us a call on
    the H200's host, 1 % of a batch-32 ResNet-50 train step, which waits on the host; benchmarks/
    train_step_ab.py). Such a layer then runs torch for every input, whatever the pins say for other shapes.

    `fold_bn_layers` (off by default): each torch.nn.BatchNorm2d whose only input is a convolution's output, that
    output going nowhere else (found by tracing the model with torch.fx), is folded into that convolution for the eager
    calls that record no gradients (library/fold_bn.py); training and compiled calls run both as torch does. A layer
    that folds one is never left as torch.nn.Conv2d, and the pins decide it as the convolution with a bias that it then
    computes. Where a torch.nn.ReLU module takes the batch norm's output alone, the layer's folded calls run that ReLU
    in the kernel where the pins say a kernel wins the fused problem (library/fused.py; the report's pattern
    `conv+bn+relu`). Where the batch norm's output gets a residual added and then a ReLU module (torchvision's
    Bottleneck and BasicBlock), the module that does so runs, in eval, its traced graph with the residual computed first
    and the kernel adding it and applying the ReLU where the pins say a kernel wins that fused problem
    (library/residual.py; the pattern `conv+bn+add+relu`). Off by default because it does not win everywhere:
    ResNet-50 b32 on the H200 ran 1.29x eager torch under bfloat16 autocast with it, and in float32 with the packaged
    pins 1.03x eager torch and 0.991x torch.compile(model) compiled: the graph is torch's, but its modules stay
    convtune's (convert otherwise hands such layers back to torch's), and dynamo guards them on each compiled call
    (20 more than torch's on 16 Bottlenecks, whatever the depth; the 0.991x was measured with two more a layer).

    At small batches a converted model's eager forward waits on the host; `graphed(model)` replays it from a CUDA graph
    (library/graphed.py: ResNet-50 b32 with its batch norms folded, 1.92x eager torch on the H200)."""
    if leave_torch_layers not in (None, True, False):
        raise ValueError(f"leave_torch_layers={leave_torch_layers!r}: give True, False or None (on with an "
                         "example_input)")
    if fold_bn_layers not in (True, False):
        raise ValueError(f"fold_bn_layers={fold_bn_layers!r}: give True or False (off by default)")
    if leave_torch_layers and example_input is None:
        raise ValueError("leave_torch_layers needs an example_input: which layers run torch depends on the input")
    if leave_torch_layers is None:
        leave_torch_layers = example_input is not None
    chains, unfolded = fold_bn.conv_bn_chains(model) if fold_bn_layers else ([], None)
    swapped = []
    for name, module in model.named_modules():
        if type(module) is torch.nn.Conv2d:
            module.__class__ = Conv2d  # a subclass with no state of its own: nothing else to move
        if isinstance(module, Conv2d):
            swapped.append((name, module))
    modules = dict(model.named_modules())
    folding, relus = {}, {}
    for conv_name, bn_name, relu_name in chains:
        if isinstance(modules[conv_name], Conv2d):
            modules[conv_name].__dict__["_bn"] = modules[bn_name]
            modules[bn_name].__class__ = fold_bn.FoldedBatchNorm2d
            folding[conv_name] = bn_name
            if relu_name is not None:
                modules[conv_name].__dict__["_fuses_relu"] = True
                modules[relu_name].__class__ = fused.FusedReLU
                relus[conv_name] = relu_name
    if fold_bn_layers:  # the residual adds after folded batch norms, and the ReLU after them (library/residual.py)
        for module_name, (graph, found) in residual.find(model, folding).items():
            for t in found:
                modules[residual.full_name(module_name, t.conv)].__dict__["_fuses_residual"] = True
            residual.rewrite(modules[module_name], graph, found)
    seen = _inputs_seen(model, example_input, swapped) if example_input is not None else {}
    report = Report()
    report.unfolded = unfolded
    for name, m in swapped:
        runs, torch_in_every_mode, decided = runs_of(m, seen.get(name), example_input is not None)
        left = leave_torch_layers and torch_in_every_mode and type(m) in _OWN_CLASSES and m._bn is None
        if left:
            m.__class__ = torch.nn.Conv2d
            runs += "; left as torch.nn.Conv2d"
        elif type(m) in _OWN_CLASSES:
            traced_as_torch = decided.get("compiled") == TORCH
            m.__class__ = TracedAsTorch if traced_as_torch else Conv2d
            if traced_as_torch:
                _traced_as_torch.add(m)
        pattern = f"conv+bn ({folding[name]})" if name in folding else "conv"
        chain = fused.RELU.chain if name in relus else residual.CHAIN if name in folding and m._fuses_residual else ()
        if chain == residual.CHAIN:
            pattern = f"conv+bn+add+relu ({folding[name]})"
        if name in relus:
            pattern = f"conv+bn+relu ({folding[name]}, {relus[name]})"
        if chain:
            said, fused_value = fused_runs_of(m, seen.get(name), chain)
            runs += said
            if fused_value is not None:
                decided["fused"] = fused_value
        report.append(Swap(name, repr(m), runs, left, decided, pattern))
    return report


def problems(model: torch.nn.Module, example_input: Any, *,
             fold_bn_layers: bool = False) -> dict[str, tuple[ConvProblem, list[str]]]:
    """The distinct convolutions `model` runs on `example_input` that convtune's kernel can take, by problem
    key (its layout the call's: a channels_last model's are channels_last), each with the layers that run it: what to
    promote (`python promote.py problem.batch=...`) so that the pins cover the model. Any device: nothing but the
    model's own forward runs (in eval mode, restored after).

    `fold_bn_layers`: the calls `convert(model, ..., fold_bn_layers=True)` makes in eval without gradients (the model
    itself is left as it is): a layer that folds a batch norm computes with a bias, and one whose ReLU it fuses asks
    for the fused problem first (epilogue `relu`: library/fused.py; `add,relu` after a residual: library/residual.py),
    which is the one listed for it. A model converted so is read the same way without the flag."""
    layers = [(n, m) for n, m in model.named_modules() if isinstance(m, torch.nn.Conv2d)]
    chains = fold_bn.conv_bn_chains(model)[0] if fold_bn_layers else []
    folding = {conv: bn for conv, bn, _ in chains}
    relus = {conv for conv, _, relu in chains if relu is not None}
    residuals = {residual.full_name(module_name, t.conv) for module_name, (_, found) in
                 residual.find(model, folding).items() for t in found} if fold_bn_layers else set()
    seen = _inputs_seen(model, example_input, layers)
    found: dict[str, tuple[ConvProblem, list[str]]] = {}
    for name, m in layers:
        x = seen.get(name)
        if x is None or _why_layer(m) or _why_input(x):
            continue
        n, c, h, w = x.shape
        k, _, kh, kw = m.weight.shape
        # a converted model's layers say it themselves (convert sets these with the batch norm they fold)
        chain = fused.RELU.chain if name in relus or getattr(m, "_fuses_relu", False) else \
            residual.CHAIN if name in residuals or getattr(m, "_fuses_residual", False) else ()
        p = ConvProblem(name, n, c, h, w, k, kh, kw, tuple(m.stride), tuple(m.padding), tuple(m.dilation), 1,  # type: ignore[arg-type]
                        has_bias(m) or name in folding, dtype=dtype_name(x), init="randn",
                        layout=call_key.call_layout(x, m.weight), epilogue=chain)
        found.setdefault(p.key(), (p, []))[1].append(name)
    return found


def _inputs_seen(model: torch.nn.Module, example_input: Any, layers: list[tuple[str, torch.nn.Module]]) -> dict[str, torch.Tensor]:
    """The input each of `layers` computes with (under torch.autocast, in its dtype) in one forward of
    `example_input`, run without gradients in eval mode
    (a train-mode forward moves BatchNorm's running statistics: on the H200 a converted ResNet-50 then gave
    other outputs, rel L2 0.94); the model's train/eval flags are restored."""
    seen: dict[str, torch.Tensor] = {}

    def keep(name: str) -> Any:
        def hook(m: torch.nn.Module, args: tuple[Any, ...]) -> None:  # None: the input goes on unchanged
            if name not in seen:  # the input as the convolution computes with it (under autocast: cast)
                seen[name] = call_key.autocast_args(args[0], m.weight, None)[0]
        return hook
    hooks = [m.register_forward_pre_hook(keep(name)) for name, m in layers]
    modes = {m: m.training for m in model.modules()}
    try:
        model.eval()
        with torch.no_grad(), residual.as_written():  # each convolution called as a module, for its hook
            model(example_input)
    finally:
        for h in hooks:
            h.remove()
        for m, training in modes.items():
            m.training = training
    return seen
