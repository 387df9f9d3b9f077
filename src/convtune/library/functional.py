"""`convtune.conv2d`: the library call. Runs what the pin for this GPU, problem, dtype and precision says: convtune's
kernel with the pinned configuration, or torch's own convolution where torch won the contest for that key
(pins.TORCH). Never autotunes unless asked to (tune_on_first_use). A lookup happens once per call signature.

Which kernel: library/dispatch.py decides (the overlay, this GPU's pin, a family pin verified here, tuning on first
use where turned on; else torch); the pins' section is the rule's (kernels.library_variant: the highest-ranked variant
whose `serves` takes the call's layout and input channels). A pin may name any of the library's kernels (a promote of
`kernel=library` found it faster for that key); each declares how the library runs it (KernelVariant.library,
kernels/base.py): its plan, the input as it reads it (a copy into its layout inside the call, rounded to TF32 for
some), and its launch, which writes the output in the call's layout, which the pins' keys name."""

from __future__ import annotations

import logging
from typing import Any, Optional

import torch
import torch.nn.functional as F

from convtune.errors import ConfigError, UnsupportedProblem
from convtune.kernels import KernelVariant, get_variant, torch_conv
from convtune import pins
from convtune.kernels.base import DTYPES
from convtune.kernels.conv_args import DTYPE_NAMES, ConvGeometry, check_conv_inputs, dtype_name, geometry
from convtune.kernels.precision import PRECISIONS
from convtune.library import dispatch, traced_op
from convtune.library.call_key import (_traced_default_precision, autocast_args, autocast_dtype, call_layout,
                                       constant_when_traced, default_precision, device_key, output_format, why_torch)
from convtune.problem import ConvProblem, for_dtype

log = logging.getLogger(__name__)
# The library call's cache: a signature → its plan (a kernel's LaunchPlan, or pins.TORCH), or, for the torch
# shortcut, whether its decision says torch. Made from dispatch's decisions and dropped with them (dispatch.forget).
_calls: dict[tuple[Any, ...], Any] = {}


def decision(x: torch.Tensor, weight: torch.Tensor, has_bias: bool, stride: Any, padding: Any, dilation: Any,
             precision: str, training: bool = False, layout: Optional[str] = None,
             compiled: bool = False, epilogue: tuple[str, ...] = ()) -> dispatch.Decision:
    """What the library runs for this call and why (library/dispatch.py decides: overlay, pin, family pin verified
    here, tuned on first use, torch). `training`: the call records gradients (records_gradients): it runs a kernel
    only under a "+train" pin. `layout`: the call's (call_layout, read off x and weight if None). `compiled`: the
    call is traced by torch.compile (a "+compiled" pin decides it). `epilogue`: what the call fuses after it."""
    gpu = device_key(x)
    return _decide(tuple(x.shape), tuple(weight.shape), has_bias, stride, padding, dilation, precision, training,
                   layout or call_layout(x, weight), gpu, x.device, compiled, dtype_name(x), epilogue)


def _decide(x_shape: tuple[int, ...], w_shape: tuple[int, ...], has_bias: bool, stride: Any, padding: Any,
            dilation: Any, precision: str, training: bool, layout: str, gpu: str, device: torch.device,
            compiled: bool, dtype: str = "float32", epilogue: tuple[str, ...] = ()) -> dispatch.Decision:
    st, pd, dl = (tuple(_pair(v)) for v in (stride, padding, dilation))
    (n, c, h, w), (c_out, _, kh, kw) = x_shape, w_shape
    p = ConvProblem("", n, c, h, w, c_out, kh, kw, st, pd, dl, 1, has_bias, dtype=dtype, layout=layout,
                    epilogue=epilogue)
    capability = torch.cuda.get_device_capability(device) if device.type == "cuda" else None
    d = dispatch.decide(p, gpu, capability, precision, training, device, compiled=compiled)
    log.debug("convtune.conv2d %s/%s%s: %s from %s", p.key(), precision,
              " (training)" if training else " (compiled)" if compiled else "", pins.describe(d.value), d.source)
    return d


@constant_when_traced
def _traced_runs_kernel(x_shape: tuple[int, ...], w_shape: tuple[int, ...], has_bias: bool, stride: tuple[int, ...],
                        padding: tuple[int, ...], dilation: tuple[int, ...], precision: str, layout: str,
                        device: str, training: bool, dtype: str = "float32") -> bool:
    """Whether a call traced by torch.compile runs convtune's operator (its "+compiled" pin names a kernel), decided
    once as the graph is traced: where it does not, the graph holds aten's convolution, which Inductor plans (layout,
    fusions) as it would without convtune. A call the kernel cannot take, or at a precision other than torch's own,
    answers True: the operator raises its precise error, or runs torch at that precision."""
    if precision != for_dtype(default_precision(), dtype):
        return True
    dev = torch.device(device)
    gpu = torch.cuda.get_device_name(dev) if dev.type == "cuda" else "interpreter"
    try:
        return _decide(x_shape, w_shape, has_bias, stride, padding, dilation, precision, training, layout, gpu, dev,
                       True, dtype).value != pins.TORCH
    except (ConfigError, UnsupportedProblem):
        return True


# Whether a traced size tells static from symbolic (from torch 2.13, `size.__class__ is int` for a static one only).
# Under torch 2.11 and 2.12 no test did so the same way twice (checked on the CPU), and a symbolic size passed to
# _traced_runs_kernel stops 2.11's compile: a direct call keeps the operator, which decides as it runs (a converted layer
# that convert decided torch for still traces as torch's: nn.TracedAsTorch)
_SIZES_TELL = tuple(int(v) for v in torch.__version__.split("+")[0].split(".")[:2]) >= (2, 13)

Plan = Any  # a kernel's LaunchPlan (its Host made it), or pins.TORCH
# plan type → the variant whose plans are of that type (registered as each first makes one): its Host (kernels/host.py)
# runs the plan, and its `bind`, where it declares one, binds it
_variants: dict[type, KernelVariant] = {}


def _plan(x: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor], stride: Any, padding: Any,
          dilation: Any, groups: int, precision: str, training: bool = False, layout: str = "nchw",
          compiled: bool = False) -> Plan:
    """The first call of a signature: every check, the pin lookup, the launch plan (or pins.TORCH). `x` is the
    call's input in either layout (`layout` is the call's); weight and bias contiguous."""
    if isinstance(padding, str):
        raise UnsupportedProblem(f"padding={padding!r} is not supported; give numbers (int or pair)")
    _check(x, weight, bias, groups)
    g = geometry(x, weight, stride, padding, dilation)
    d = decision(x, weight, bias is not None, g.stride, g.padding, g.dilation, precision, training, layout, compiled)
    value, source = d.value, d.source
    if value == pins.TORCH:
        return pins.TORCH
    try:
        return _kernel_plan(x, g, bias is not None, value, precision, layout == "channels_last")  # type: ignore[arg-type]
    except UnsupportedProblem as e:  # promote never pins a kernel to a call it refuses: a hand-written or foreign pin
        if not source.startswith(("pin ", "nearest pin ")):
            raise
        raise UnsupportedProblem(f"{e}: the kernel of {source} in {pins.default_path()}; pin this call to another "
                                 "kernel or to torch") from e


def _kernel_plan(x: torch.Tensor, g: ConvGeometry, has_bias: bool, value: pins.KernelPin, precision: str,
                 out_cl: bool) -> Plan:
    """The plan of the kernel a pin names, made by its Host (kernels/host.py: each variant declares how the
    library runs it)."""
    variant = get_variant(value.kernel)
    if variant.library is None:
        raise UnsupportedProblem(f"{value.kernel} is not one of the library's kernels (a pin may name only those)")
    if not variant.takes_dtype(dtype_name(x)):  # a pin of its dtype's key names it: a hand-written pin, say
        raise UnsupportedProblem(f"{value.kernel} takes {'/'.join(variant.dtypes)}, not {dtype_name(x)}")
    plan = variant.library.plan_for(x, g, has_bias, value.meta, precision, out_cl)
    _variants[type(plan)] = variant
    return plan


def _check(x: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor], groups: int) -> None:
    """Every check of a call's tensors, raising the precise error (the input may be in either layout)."""
    check_conv_inputs(x, weight, bias, groups, contiguous=False, dtypes=DTYPES)
    for name, t in (("weight", weight), ("bias", bias)):
        if t is not None and not t.is_contiguous():
            raise UnsupportedProblem(f"{name} must be contiguous; call .contiguous() first")


def records_gradients(input: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor]) -> bool:
    """Whether a call is part of training: autograd records it (a "+train" pin decides such calls)."""
    return torch.is_grad_enabled() and (input.requires_grad or weight.requires_grad
                                        or (bias is not None and bias.requires_grad))


def pinned_to_torch(input: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor], stride: Any,
                    padding: Any, dilation: Any, precision: str, groups: int = 1, training: bool = False) -> bool:
    """Whether the pin for this call says torch, decided once per signature (the layout is part of it: the
    pins of each layout are their own; torch's convolution takes any layout natively). A call the kernel cannot
    take answers False, and the kernel's path then raises its precise error."""
    strides = None if input.is_contiguous() and weight.is_contiguous() else (input.stride(), weight.stride())
    key = ("torch?", input.shape, weight.shape, bias is None, _hashable(stride), _hashable(padding),
           _hashable(dilation), groups, precision, input.get_device(), input.dtype, weight.dtype,
           None if bias is None else bias.dtype, training, strides)
    hit = _calls.get(key)
    if hit is None:
        hit = _calls[key] = _looks_up_torch(input, weight, bias, stride, padding, dilation, groups, precision, training)
    return hit


def _looks_up_torch(input: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor], stride: Any,
                    padding: Any, dilation: Any, groups: int, precision: str, training: bool) -> bool:
    if groups != 1 or isinstance(padding, str) or input.dim() != 4 or weight.dim() != 4 or any(
            t is not None and t.dtype is not input.dtype for t in (weight, bias)) or dtype_name(input) not in DTYPES:
        return False
    try:
        return decision(input, weight, bias is not None, stride, padding, dilation, precision, training).value == pins.TORCH
    except (ConfigError, UnsupportedProblem):  # not a problem the kernel takes: its own path says why
        return False


def _hashable(v: Any) -> Any:
    return v if isinstance(v, (int, str)) else tuple(v)


def _run(input: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor], stride: Any, padding: Any,
         dilation: Any, groups: int, precision: str, training: bool = False, compiled: bool = False) -> torch.Tensor:
    """The kernel itself: the cached plan for this signature (made, with every check, on its first call). An
    NCHW-contiguous input makes an NCHW call; any other a channels_last call, with a channels_last output.
    `compiled`: the operator in a torch.compile graph (its "+compiled" pin decides)."""
    layout = "nchw" if input.is_contiguous() else "channels_last"
    plan = _cached_plan(input, weight, bias, stride, padding, dilation, groups, precision, training, layout, compiled)
    if plan is pins.TORCH:  # only in a compiled graph, whose pin changed since it was traced, or at another precision
        return torch_conv.conv2d(input, weight, bias, stride, padding, dilation, precision)
    call = _variants[type(plan)].library
    x = call.kernel_input(input, plan)  # a copy into its layout (none where the input has it), rounded, or as it is
    # what the signature (the plan's key) leaves out is checked on every call: dtypes, devices, contiguity, the
    # bias's size (a bias of 3 for 4 channels would leave a channel without bias, or read past its end on a GPU)
    if not (weight.is_contiguous() and weight.dtype is x.dtype and weight.get_device() == x.get_device()
            and (bias is None or (bias.is_contiguous() and bias.dtype is x.dtype and bias.get_device() == x.get_device()
                                  and bias.dim() == 1 and bias.shape[0] == weight.shape[0]))):
        _check(x, weight, bias, groups)  # raises the precise error
    out = torch.empty(plan.out_shape, device=x.device, dtype=x.dtype,  # x's dtype: the plan's key holds it
                      memory_format=torch.channels_last if plan.out_cl else torch.contiguous_format)
    call.run(plan, x, weight, bias, out)
    return out


class Bound:
    """One layer's call signature with everything decided: the plan and the launch its variant bound to it
    (KernelVariant.bind). A call goes through it only if `matches` says the call is the one it was made for: the same
    input shape and dtype, NCHW-contiguous, on the same device with the same alignment, the same weight and bias
    tensors on the same storage, the same precision and pins. Anything else takes the full path. Gradients go
    through _EagerConv, the same backward as the operator's."""

    __slots__ = ("shape", "dtype", "device", "align", "weight", "weight_ptr", "bias", "precision", "generation", "geometry",
                 "call", "training")

    def __init__(self, x: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor], geometry: tuple[Any, ...],
                 precision: str, call: Any, training: bool) -> None:
        self.shape, self.dtype, self.device, self.align = x.shape, x.dtype, x.get_device(), x.data_ptr() & 15
        self.weight, self.weight_ptr, self.bias = weight, weight.data_ptr(), bias
        self.precision, self.generation, self.geometry = precision, dispatch.generation, geometry
        self.call = call  # (x, weight, bias) → output
        self.training = training  # made for calls that record gradients, or for calls that do not

    def matches(self, x: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor], precision: str) -> bool:
        return (x.shape == self.shape and x.dtype is self.dtype and x.is_contiguous() and x.get_device() == self.device
                and x.data_ptr() & 15 == self.align and weight is self.weight and weight.data_ptr() == self.weight_ptr
                and bias is self.bias and precision == self.precision and dispatch.generation == self.generation)

    def __call__(self, x: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor]) -> torch.Tensor:
        """conv2d for a call that `matches`."""
        if self.training:  # made for calls that record gradients: nn.Conv2d.forward calls it only for those
            return _EagerConv.apply(x, weight, bias, *self.geometry, self.precision, self)
        return self.call(x, weight, bias)

    def launch(self, x: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor]) -> torch.Tensor:
        return self.call(x, weight, bias)


def bind(input: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor], stride: Any, padding: Any,
         dilation: Any, precision: str, training: bool = False) -> Optional[Bound]:
    """A Bound for this call, whose pin says convtune's kernel (the caller has checked), or None where the call
    cannot have one (off CUDA, a layout other than NCHW-contiguous, a kernel that declares no bound launch or whose
    plan has none here, a Triton without a bindable runner). Every check of the full path runs here, once."""
    if not (input.is_cuda and input.is_contiguous() and weight.is_contiguous()
            and (bias is None or bias.is_contiguous())):
        return None
    plan = _cached_plan(input, weight, bias, stride, padding, dilation, 1, precision, training)
    variant = _variants.get(type(plan))
    if variant is None or variant.bind is None:  # pins.TORCH, or a kernel with no bound launch
        return None
    _check(input, weight, bias, 1)  # dtypes and devices: raises the precise error
    call = variant.bind(plan, input, weight, bias)
    if call is None:
        return None
    return Bound(input, weight, bias, (_pair(stride), _pair(padding), _pair(dilation)), precision, call, training)


class _EagerConv(torch.autograd.Function):
    """The kernel with gradients in eager mode: torch.autograd.Function's dispatch costs less host time than the
    custom operator's, which torch.compile needs (it traces the operator; eager calls with gradients come here).
    The backward is the operator's."""

    @staticmethod
    def forward(ctx: Any, input: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor], stride: list[int],
                padding: list[int], dilation: list[int], precision: str, bound: Optional[Bound]) -> torch.Tensor:
        ctx.save_for_backward(input, weight)
        ctx.has_bias, ctx.geometry = bias is not None, (stride, padding, dilation)
        if bound is not None:
            return bound.launch(input, weight, bias)
        return _run(input, weight, bias, stride, padding, dilation, 1, precision, training=True)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:  # type: ignore[override]
        return traced_op.backward(ctx, grad)  # a gradient per argument: the operator's last is `training`, this `bound`


def _cached_plan(input: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor], stride: Any, padding: Any,
                 dilation: Any, groups: int, precision: str, training: bool = False, layout: str = "nchw",
                 compiled: bool = False) -> Plan:
    key = (input.shape, weight.shape, bias is None, _hashable(stride), _hashable(padding), _hashable(dilation),
           groups, precision, input.get_device(), input.dtype, input.data_ptr() & 15, training, layout, compiled)
    plan = _calls.get(key)
    if plan is None:
        plan = _calls[key] = _plan(input, weight, bias, stride, padding, dilation, groups, precision, training, layout,
                                   compiled)
    return plan


def _pair(v: Any) -> list[int]:
    return [v, v] if isinstance(v, int) else [int(i) for i in v]


# The kernel of the operator torch.compile traces (library/traced_op.py): a call decided by its "+compiled" pin.
def _conv2d_kernel(input: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor], stride: list[int],
                   padding: list[int], dilation: list[int], precision: str, training: bool = False) -> torch.Tensor:
    return _run(input, weight, bias, stride, padding, dilation, 1, precision, training, compiled=True)


traced_op.implement(_conv2d_kernel)


def conv2d(input: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor] = None, stride: Any = 1,
           padding: Any = 0, dilation: Any = 1, groups: int = 1, precision: Optional[str] = None) -> torch.Tensor:
    """torch.nn.functional.conv2d, with gradients (through PyTorch's convolution backward) and traceable by
    torch.compile (the operator convtune::conv2d). A call no kernel of convtune takes (why_torch: a CPU tensor, a
    dtype other than float32, bfloat16 and float16, groups, string padding, an input that is not 4-d) runs torch's
    convolution, the reason logged at DEBUG (logger convtune.library.functional), as convtune.nn.Conv2d does. Under
    torch.autocast it computes in the region's dtype, as torch's does (call_key.autocast_args); a 16-bit call is
    decided by its dtype's pins at precision tf32 (problem.for_dtype).

    Any layout is taken, and the output follows torch's rule (output_format). What runs is library/dispatch.decide's:
    a pinned kernel (on the input copied into the layout it reads) or torch. The first call of a signature (shapes,
    dtype, layout, padding, precision, device, alignment) checks everything and caches a launch plan. Under
    torch.compile a call is decided as it is traced, by its "+compiled" pin: aten's convolution goes into the graph,
    for Inductor to plan, unless that pin names a kernel; recompile (torch._dynamo.reset()) after the pins change."""
    compiling = torch.compiler.is_compiling()
    if precision is not None and precision not in PRECISIONS:
        raise ConfigError("precision", precision, f"one of {list(PRECISIONS)}, or None: as torch runs float32 "
                                                  "convolutions (tf32 unless torch.backends.cudnn.allow_tf32 is off)")
    cast_to = autocast_dtype(input, compiling)  # torch gets the tensors as given where it runs: autocast casts them
    why = why_torch(input, weight, bias, groups, padding, cast_to)
    if why is not None:
        log.debug("convtune.conv2d runs torch: %s", why)
        return torch_conv.conv2d(input, weight, bias, stride, padding, dilation, precision, groups)
    dtype = DTYPE_NAMES[cast_to or input.dtype]
    precision = for_dtype(precision or (_traced_default_precision() if compiling else default_precision()), dtype)
    if compiling:
        if not _traced_kernel(input, weight, bias, stride, padding, dilation, precision, dtype):
            return F.conv2d(input, weight, bias, stride, padding, dilation, groups)
        return kernel_conv2d(*autocast_args(input, weight, bias, cast_to), stride, padding, dilation, groups, precision)
    cast = autocast_args(input, weight, bias)
    if pinned_to_torch(*cast, stride, padding, dilation, precision, groups, records_gradients(*cast)):
        return torch_conv.conv2d(input, weight, bias, stride, padding, dilation, precision)
    return kernel_conv2d(*cast, stride, padding, dilation, groups, precision)


def _traced_kernel(input: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor], stride: Any, padding: Any,
                   dilation: Any, precision: str, dtype: str) -> bool:
    """While torch.compile traces: whether the call goes into the graph as convtune's operator (_traced_runs_kernel),
    else as aten's convolution. Symbolic shapes (`d.__class__`: _SIZES_TELL) keep the operator, decided as it runs."""
    if not _SIZES_TELL or not all(d.__class__ is int for d in (*input.shape, *weight.shape)):
        return True
    return _traced_runs_kernel(tuple(input.shape), tuple(weight.shape), bias is not None, tuple(_pair(stride)),
                               tuple(_pair(padding)), tuple(_pair(dilation)), precision,
                               call_layout(input, weight), str(input.device), records_gradients(input, weight, bias),
                               dtype)


def kernel_conv2d(input: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor], stride: Any,
                  padding: Any, dilation: Any, groups: int, precision: str) -> torch.Tensor:
    """conv2d once the pin has been found not to say torch (in eager mode; under torch.compile, where the call keeps
    the operator: _traced_kernel): convtune's kernel, through the operator where autograd or compile needs it."""
    compiling = torch.compiler.is_compiling()
    fmt = output_format(input, weight)
    input = input.contiguous(memory_format=fmt)  # no copy when already in the call's layout
    weight = weight.contiguous()  # no copy when already NCHW (the kernels pack their own order once per weight)
    bias = None if bias is None else bias.contiguous()
    needs_op = compiling or records_gradients(input, weight, bias)
    if not needs_op:
        out = _run(input, weight, bias, stride, padding, dilation, groups, precision)
    else:
        if groups != 1 or isinstance(padding, str):
            _plan(input, weight, bias, stride, padding, dilation, groups, precision)  # raises the precise error
        geometry = (_pair(stride), _pair(padding), _pair(dilation))
        out = traced_op.conv2d(input, weight, bias, *geometry, precision, records_gradients(input, weight, bias)) \
            if compiling else \
            _EagerConv.apply(input, weight, bias, *geometry, precision, None)
    return out if fmt is torch.contiguous_format else out.contiguous(memory_format=fmt)


def cached_plans() -> list[Any]:
    """The launch plans the library's calls made so far (their kernels' LaunchPlans; not the torch decisions)."""
    return [v for k, v in _calls.items() if k[0] != "torch?" and v is not pins.TORCH]


dispatch.on_forget.append(_calls.clear)  # one way to drop what the library decided: dispatch.forget()
