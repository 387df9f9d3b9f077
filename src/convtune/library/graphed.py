"""A model's forwards without gradients, replayed from CUDA graphs: `convtune.nn.graphed(model)`.

A converted model waits on the host at small batches: ResNet-50 b32's converted forward took 4.23 ms of host time on
the H200 for 2.53 ms on the GPU. A graph launches a whole forward with one call, so the layers' Python runs at capture
only. ResNet-50 b32 on the H200 (float32, NCHW, eval, batch norms folded; `benchmarks/compiled_models.py --models
resnet50:32 --fold-bn --graphs`, medians of 40 turns in one process): torch's eager forward 5.400 ms, the converted
model's eager forward 4.865 ms, replayed through this wrapper 2.845 ms (1.92x eager torch); torch's own model replayed
5.358 ms, torch.compile(model) 3.402 ms, with mode="reduce-overhead" 3.172 ms.

What replays: a call of a model whose modules are all in eval mode, with positional arguments that are all CUDA
tensors on one device and no keyword arguments, that records no gradients (grad mode off, or no argument and no
parameter requiring one) and is not traced by torch.compile. A call's signature is each argument's shape, strides and
dtype, the device, the autocast state, the TF32 flags and inference mode. The first call of a signature runs the
model eagerly `warmup` times on a side stream, as CUDA graphs need (convtune's tuning on first use, compiling and
weight packing happen there), then captures one forward; every later call of it copies its arguments into the
graph's inputs, replays, and returns a copy of the graph's outputs (the next replay overwrites them). At most
`max_graphs` signatures are kept; a call of any other runs eagerly.

A graph reads the parameters and buffers, and what convtune derives from them (folded batch norms, packed and cast
weights), where they were when it was captured. So each call checks every parameter's and buffer's data pointer and
version counter, and the pins' generation, and captures again where one moved: an optimiser step, load_state_dict,
Module.to, new pins. Registering a parameter, buffer or module anywhere (torch's global module registration hooks) makes
the next call list them again. What no check sees: a layer's other attributes set after capture (stride, padding, ...),
a tensor written into a module's _parameters or _buffers dict directly, Python side effects of the forward (hooks,
prints), which run in the warmups and the capture only; call `reset()` after such changes. A model that cannot be
captured (a host synchronisation, a CPU tensor made in its forward) runs eagerly for that signature, with one warning
that says why.
"""

from __future__ import annotations

import contextlib
import logging
import operator
import warnings
from dataclasses import dataclass
from typing import Any, Optional

import torch

from convtune.library import dispatch

log = logging.getLogger(__name__)

_structure = 0  # bumped whenever any module registers a parameter, buffer or submodule (global hooks, set once)
_hooked = False


def _bump(*_: Any) -> None:
    global _structure
    _structure += 1


def _hook_registrations() -> None:
    global _hooked
    if not _hooked:
        torch.nn.modules.module.register_module_parameter_registration_hook(_bump)
        torch.nn.modules.module.register_module_buffer_registration_hook(_bump)
        torch.nn.modules.module.register_module_module_registration_hook(_bump)
        _hooked = True


@dataclass
class _Replay:
    graph: Any  # torch.cuda.CUDAGraph
    inputs: list[torch.Tensor]  # the graph's own inputs: each call copies its arguments into them
    output: Any  # the graph's output, as the model returned it (tensors in tuples, lists and dicts)
    state: tuple  # the parameters' and buffers' data pointers and versions, and the pins' generation, at capture


class Graphed(torch.nn.Module):
    """`module` with its forwards that record no gradients replayed from CUDA graphs (the module docstring says
    which calls, and what is checked on each). The wrapped model is `self.module` (its state_dict's keys gain the
    prefix "module.", as under torch.nn.DataParallel)."""

    def __init__(self, module: torch.nn.Module, warmup: int = 2, max_graphs: int = 4) -> None:
        super().__init__()
        if not isinstance(module, torch.nn.Module):
            raise TypeError(f"graphed takes a torch.nn.Module, not {type(module).__name__}")
        if isinstance(warmup, bool) or not isinstance(warmup, int) or warmup < 1:
            raise ValueError(f"warmup={warmup!r}: give the number of eager forwards before a capture, 1 or more")
        if isinstance(max_graphs, bool) or not isinstance(max_graphs, int) or max_graphs < 1:
            raise ValueError(f"max_graphs={max_graphs!r}: give how many signatures to keep graphs of, 1 or more")
        _hook_registrations()
        self.module = module
        self.warmup, self.max_graphs = warmup, max_graphs
        self.reset()

    def reset(self) -> None:
        """Drop every graph (and the memory each holds) and every signature that could not be captured: the next call
        of each captures again."""
        self._graphs: dict[tuple, _Replay] = {}
        self._failed: dict[tuple, str] = {}  # signature → why its capture failed: such calls run eagerly
        self._listed: Optional[tuple[int, list[torch.nn.Module], list[torch.Tensor]]] = None

    def __getstate__(self) -> dict:
        """What copy.deepcopy and pickle keep: everything but the graphs (a CUDA graph cannot be copied; a copy
        captures its own on its calls)."""
        state = super().__getstate__()
        state.update(_graphs={}, _failed={}, _listed=None)
        return state

    def extra_repr(self) -> str:
        return f"warmup={self.warmup}, max_graphs={self.max_graphs}, graphs={len(self._graphs)}"

    @property
    def graphs(self) -> int:
        """How many signatures have a graph now."""
        return len(self._graphs)

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        modules, tensors = self._lists()
        if self.why_eager(args, kwargs, modules, tensors) is not None:
            return self.module(*args, **kwargs)
        sig = signature(args)
        if sig in self._failed:
            return self.module(*args)
        state = _state(tensors)
        replay = self._graphs.get(sig)
        if replay is not None and replay.state != state:
            del self._graphs[sig]  # captured before a parameter, buffer or pin moved: its memory goes first
            replay = None
        if replay is None:
            if len(self._graphs) >= self.max_graphs:
                return self.module(*args)
            replay = self._capture(sig, args)
            if replay is None:
                return self.module(*args)
            self._graphs[sig] = replay
        device = args[0].device
        with torch.cuda.device(device) if device.index != torch.cuda.current_device() else _nothing:
            for own, arg in zip(replay.inputs, args):
                own.copy_(arg)
            replay.graph.replay()
            return _copied(replay.output)

    def why_eager(self, args: tuple, kwargs: dict, modules: Optional[list[torch.nn.Module]] = None,
                  tensors: Optional[list[torch.Tensor]] = None) -> Optional[str]:
        """Why a call with these arguments runs the model eagerly rather than from a graph; None: it replays (or
        captures). `modules` and `tensors`: the model's, where the caller has listed them."""
        if torch.compiler.is_compiling():
            return "traced by torch.compile"
        if kwargs:
            return "keyword arguments (a graph takes positional tensors)"
        if not args:
            return "no arguments"
        if not all(isinstance(a, torch.Tensor) for a in args):
            return "an argument that is not a tensor (a graph takes positional tensors)"
        if modules is None or tensors is None:
            modules, tensors = self._lists()
        if any(map(_training, modules)):
            return "a module in training mode (graphs replay eval forwards: call model.eval())"
        if torch.is_grad_enabled() and (any(map(_requires_grad, args)) or any(map(_requires_grad, tensors))):
            return "records gradients (graphs replay forwards under torch.no_grad or torch.inference_mode)"
        device = args[0].device
        if device.type != "cuda" or any(a.device != device for a in args):
            return "arguments not all on one CUDA device"
        return None

    def _lists(self) -> tuple[list[torch.nn.Module], list[torch.Tensor]]:
        """The model's modules, and its parameters and buffers, listed again after any registration anywhere."""
        listed = self._listed
        if listed is None or listed[0] != _structure:
            modules = list(self.module.modules())
            tensors = [t for m in modules for d in (m._parameters, m._buffers) for t in d.values() if t is not None]
            listed = self._listed = (_structure, modules, tensors)
        return listed[1], listed[2]

    def _capture(self, sig: tuple, args: tuple) -> Optional[_Replay]:
        device = args[0].device
        inputs = [torch.empty_strided(a.shape, a.stride(), dtype=a.dtype, device=device).copy_(a)
                  for a in args]  # the arguments' own strides, dense or not: the forward sees what it would eagerly
        # autocast's cast cache off (torch's CUDA graph notes): a cast a warmup forward kept would be read by the graph
        # after the autocast region that made it has freed it
        with torch.cuda.device(device), torch.autocast("cuda", dtype=torch.get_autocast_dtype("cuda"),
                                                       enabled=torch.is_autocast_enabled("cuda"), cache_enabled=False):
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):  # what the forward raises here it raises eagerly too: it goes to the caller
                for _ in range(self.warmup):
                    self.module(*inputs)
            torch.cuda.current_stream().wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            try:
                with torch.cuda.graph(graph):
                    output = self.module(*inputs)
            except Exception as e:  # what only a capture refuses: a host synchronisation, a CPU tensor, ...
                why = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
                self._failed[sig] = why
                warnings.warn(f"convtune.nn.graphed: this call's forward could not be captured as a CUDA graph "
                              f"({why}); its calls run eagerly", RuntimeWarning, stacklevel=3)
                return None
        log.debug("convtune.nn.graphed: captured a graph for %s", sig[:2])
        return _Replay(graph, inputs, output, _state(self._lists()[1]))


def signature(args: tuple) -> tuple:
    """What a graph is captured for (the module docstring's list; the train/eval flags are checked apart: every module
    is in eval mode)."""
    device = args[0].device
    return (tuple((a.shape, a.stride(), a.dtype) for a in args), device,
            torch.is_autocast_enabled(device.type), torch.get_autocast_dtype(device.type),
            torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32, torch.is_inference_mode_enabled())


def _state(tensors: list[torch.Tensor]) -> tuple:
    """The parameters' and buffers' data pointers and versions, and the pins' generation (read through map: no Python
    frame a tensor). The data pointers are what a `param.data = ...` moves: it leaves the version as it was. For
    ResNet-50's 320 tensors this took 56-65 us on the H200's host, of the 155 us a call that the wrapper adds to a bare
    replay's 45 us."""
    return dispatch.generation, tuple(map(_pointer, tensors)), tuple(map(_version, tensors))


_pointer, _version = torch.Tensor.data_ptr, operator.attrgetter("_version")
_training, _requires_grad = operator.attrgetter("training"), operator.attrgetter("requires_grad")


_nothing = contextlib.nullcontext()


def _copied(output: Any) -> Any:
    """A copy of the graph's output, in the structure the model returned."""
    if isinstance(output, torch.Tensor):
        return output.clone()
    if isinstance(output, tuple) and hasattr(output, "_fields"):  # a named tuple
        return type(output)(*(_copied(o) for o in output))
    if isinstance(output, (tuple, list)):
        return type(output)(_copied(o) for o in output)
    if isinstance(output, dict):
        return type(output)((k, _copied(v)) for k, v in output.items())
    return output


def graphed(model: torch.nn.Module, warmup: int = 2, max_graphs: int = 4) -> Graphed:
    """`model` with its forwards that record no gradients replayed from CUDA graphs (library/graphed.py): a call
    copies its arguments in, replays one graph of the whole forward and returns a copy of the outputs, checking first
    that no parameter, buffer or pin moved since capture. For a converted model, whose eager forward waits on the
    host at small batches. Other calls (gradients, CPU tensors, keyword arguments, torch.compile) run `model` as it
    is."""
    return Graphed(model, warmup, max_graphs)
