"""tune_model.py's step 4: the model end to end, torch against the converted model and the converted model without
each shape that runs a kernel, in interleaved turns (measure/ab.py); a shape keeps its kernel pin only where the model
is faster with it. In the context the pins are for: eager forwards, train steps (train=true) or, with compile=true,
forwards of the model compiled by torch.compile against the compiled torch model. With fold_bn=true the converted
model folds its batch norms and fuses the ReLUs and residual adds after them (convert's fold_bn_layers), against
torch's model as it is.
"""

from __future__ import annotations

import datetime
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from dataclasses import dataclass
from typing import Any, Optional

from omegaconf import DictConfig

from convtune.config import enum_value
from convtune.problem import ConvProblem
from convtune.record import Metric


@dataclass
class Shape:
    """A distinct convolution call of the model, and the layers that make it."""

    problem: ConvProblem
    layers: list[str]

    @property
    def flops(self) -> int:
        """Per model call: the shape's FLOPs times the layers that run it."""
        return self.problem.flops * len(self.layers)


def model_dtype(cfg: DictConfig) -> str:
    """The dtype the model's convolutions compute in: `dtype`, else bfloat16 under autocast=true, else float32."""
    return enum_value(cfg.dtype) or ("bfloat16" if cfg.autocast else "float32")


def autocasting(cfg: DictConfig, x: Any) -> Any:
    """torch.autocast in the model's dtype on x's device for autocast=true, else a context that does nothing."""
    import contextlib

    import torch

    from convtune.kernels.conv_args import TORCH_DTYPES

    return torch.autocast(x.device.type, dtype=TORCH_DTYPES[model_dtype(cfg)]) if cfg.autocast else \
        contextlib.nullcontext()


def end_to_end(model: Any, x: Any, cfg: DictConfig, shapes: list[Shape], precision: str, gpu: str,
               target: Path) -> tuple[str, dict[str, float], list[str]]:
    """Time torch, the converted model and the converted model without each kernel shape; pin torch for a shape
    the model is not faster with; time torch against the final model again if that changed anything. Returns (the
    table, the metrics, the pin keys dropped).

    With train=true the converted model's training calls run the shapes' plain (forward) pins while this measures
    (dispatch.forward_pins_in_training: a training call otherwise runs a kernel only under a "+train" pin); then each
    kernel shape gets its "+train" pin: its kernel where the train steps were faster with it, else torch. compile=true
    does the same for compiled calls (dispatch.eager_pins_in_compile) and "+compiled" pins, each configuration a
    compiled copy of the model."""
    import contextlib

    from convtune.kernels import library_variant
    from convtune import pins
    from convtune.library import dispatch
    from convtune.measure import ab
    from convtune.library.nn import Conv2d as Ours, convert

    context = "train" if cfg.train else "compiled" if cfg.compile else "eager"
    trial = context != "eager" and not cfg.measure_only
    switch = dispatch.forward_pins_in_training if cfg.train else dispatch.eager_pins_in_compile
    with switch() if trial else contextlib.nullcontext():
        with autocasting(cfg, x):  # autocast=true: the calls convert decides are the autocast dtype's
            # every layer ours: classes (or, for a layer that folds, hold_torch) take turns
            report = convert(model, example_input=x, leave_torch_layers=False, fold_bn_layers=cfg.fold_bn)
        kernel_shapes, ran = _on_kernel(report, shapes, context)
        on_kernel = set(ran)
        convs = [(name, m) for name, m in model.named_modules() if isinstance(m, Ours)]
        steps = (_compiled_steps if cfg.compile else _steps)(model, x, cfg.train, convs, lambda: autocasting(cfg, x))
        configs = {"torch": steps(None), "converted": steps(on_kernel)}
        for s in kernel_shapes:
            configs[f"without {s.problem.key()}"] = steps(on_kernel - set(s.layers))
        times = ab.take_turns(configs, cfg.turns, cfg.warmup)
    rows = [_row("torch", times, "torch", len(convs), 0, "compiled" if cfg.compile else "")]
    rows.append(_row("converted", times, "torch", len(convs), len(on_kernel),
                     {"train": "training calls on the plain pins", "compiled": "compiled, on the eager pins"}[context]
                     if trial else "compiled" if cfg.compile else ""))
    dropped, kept = [], set(on_kernel)
    for s in kernel_shapes:
        without = f"without {s.problem.key()}"
        gain = ab.ratio(times, "converted", without)  # with the shape's kernel / without it
        keep = gain.faster
        verdict = ("faster with it" + (f": {pins.CONTEXTS[context]} pin" if trial else "") if keep
                   else "not faster with it" if cfg.measure_only else "torch pinned")
        rows.append(_row(without, times, "torch", len(convs), len(on_kernel - set(s.layers)),
                         f"with / without: {gain} → {verdict}"))
        if cfg.measure_only or (keep and not trial):
            continue
        key = pins.pin_key(s.problem.key(), precision, training=cfg.train, compiled=cfg.compile)
        value = next(ran[name] for name in s.layers if name in ran) if keep else pins.TORCH
        pins.write_pin(target, gpu, library_variant(s.problem.layout, s.problem.in_channels), key, value, {
            "rule": "tune_model: the model was " + ("faster" if keep else "not faster") + " with the kernel",
            "context": context, "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "method": f"tune_model.py model={cfg.model} batch={cfg.batch}: {cfg.turns} interleaved "
                      f"{'train steps' if cfg.train else 'compiled eval forwards' if cfg.compile else 'eval forwards'}",
            "layers": list(s.layers),
            "ratio_with_over_without": round(gain.median, 4), "interval": [round(gain.low, 4), round(gain.high, 4)]})
        if not keep:
            dropped.append(key)
            kept -= set(s.layers)
    final = "converted"
    if dropped or (trial and kernel_shapes):  # the library as it now runs: its context's pins, outside the trial
        dispatch.forget()  # the maker's steps decide again; it knows each module's classes from before the turns
        times = ab.take_turns({"torch": steps(None), "final": steps(kept)}, cfg.turns, cfg.warmup)
        rows.append(_row("final", times, "torch", len(convs), len(kept),
                         f"{len(dropped)} shape(s) handed to torch" if dropped else "as the library now runs it"))
        final = "final"
    r = ab.ratio(times, final, "torch")
    head = ("| model | median ms per " + ("train step" if cfg.train else "compiled forward" if cfg.compile else
                                          "forward") + " | time / torch (95 % interval)"
            " | speedup | layers on convtune | note |\n|---|---|---|---|---|---|")
    outcome = "as converted" if cfg.measure_only else "as tuned"
    peer = "torch.compile(model)" if cfg.compile else "torch"
    table = head + "\n" + "\n".join(rows) + f"\n\n{outcome}, decided in {context} context: {1 / r.median:.3f}x " \
        f"{peer} (time ratio {r})"
    numbers = {Metric.SPEEDUP_VS_TORCH: 1 / r.median, Metric.TIME_RATIO: r.median, Metric.TIME_RATIO_LOW: r.low,
               Metric.TIME_RATIO_HIGH: r.high, Metric.STEP_MS_TORCH: 1e3 * statistics.median(times["torch"]),
               Metric.STEP_MS_TUNED: 1e3 * statistics.median(times[final])}
    return table, numbers, dropped


def _on_kernel(report: Any, shapes: list[Shape], context: str) -> tuple[list[Shape], dict[str, Any]]:
    """The shapes whose layers run a kernel in `context`, as the layers call them, and each such layer's kernel pin.
    A layer that fuses what follows it (its ReLU, or its residual add and ReLU: library/fused.py, library/residual.py)
    is listed under its fused problem where a kernel wins that, else under the plain folded convolution, which its
    calls then ask for (a shape of its own here, though `shapes` names the fused one)."""
    import dataclasses

    from convtune import pins

    swaps = {sw.name: sw for sw in report}
    grouped: dict[str, Shape] = {}
    ran: dict[str, Any] = {}
    for s in shapes:
        for name in s.layers:
            decided = swaps[name].decided if name in swaps else {}
            p = s.problem
            value = decided.get("fused", pins.TORCH) if p.epilogue and context == "eager" else pins.TORCH
            if value == pins.TORCH:
                p, value = dataclasses.replace(p, epilogue=()), decided.get(context, pins.TORCH)
            if value == pins.TORCH:
                continue
            grouped.setdefault(p.key(), Shape(p, []))
            grouped[p.key()].layers.append(name)
            ran[name] = value
    return list(grouped.values()), ran


def _row(name: str, times: dict[str, list[float]], baseline: str, layers: int, ours: int, note: str = "") -> str:
    from convtune.measure import ab

    ms = 1e3 * statistics.median(times[name])
    if name == baseline:
        return f"| {name} | {ms:.3f} | 1 | 1 | 0 of {layers} | {note} |"
    r = ab.ratio(times, name, baseline)
    return f"| {name} | {ms:.3f} | {r} | {1 / r.median:.3f}x | {ours} of {layers} | {note} |"


def _steps(model: Any, x: Any, train: bool, convs: list[tuple[str, Any]],
           autocast: Callable[[], Any]) -> Callable[[Optional[set[str]]], Callable[[], float]]:
    """A maker of step functions: for a set of layer names on convtune's kernel, one model step (an eval forward,
    or an SGD step on the output's mean; its forward within `autocast()`) with those layers convtune.nn.Conv2d and the
    rest torch's convolution, timed on the host up to a synchronize (what a loop waits for); for None, the model as
    torch runs it. One module and one optimizer for all: the same parameters and tensors, so the modules' classes are
    the one difference. A layer that folds a batch norm (convert's fold_bn_layers) runs torch's convolution by
    hold_torch, so that its batch norm stays folded; in the torch model its batch norm, its ReLU and the module that
    adds its residual are torch's again."""
    import torch

    from convtune.library import residual
    from convtune.library.fold_bn import FoldedBatchNorm2d
    from convtune.library.fused import FusedReLU
    from convtune.library.nn import Conv2d as Ours

    opt = torch.optim.SGD(model.parameters(), lr=1e-6) if train else None
    model.train(train)
    sync = torch.cuda.synchronize if x.is_cuda else (lambda: None)
    folding = {name for name, m in convs if m._bn is not None}
    # convert's classes around the convolutions, and torch's: the batch norms, the ReLUs and the modules whose residual
    # add it fuses (library/residual.py: a subclass of the module's class)
    around = [(m, type(m), torch.nn.BatchNorm2d if isinstance(m, FoldedBatchNorm2d) else
               torch.nn.ReLU if isinstance(m, FusedReLU) else type(m).__mro__[1]) for m in model.modules()
              if isinstance(m, (FoldedBatchNorm2d, FusedReLU)) or residual.TRACED in m.__dict__]

    def make(on_kernel: Optional[set[str]]) -> Callable[[], float]:
        ours = set() if on_kernel is None else on_kernel | folding
        classes = [(m, Ours if name in ours else torch.nn.Conv2d) for name, m in convs]
        classes += [(m, theirs if on_kernel is None else c) for m, c, theirs in around]
        held = [(m, name in folding and name not in (on_kernel or set())) for name, m in convs]

        def step() -> float:
            for m, c in classes:  # object.__setattr__: convtune's __setattr__ would drop the layer's cached decision
                object.__setattr__(m, "__class__", c)
            for m, h in held:
                Ours.hold_torch(m, h)  # also for a layer that is torch.nn.Conv2d this step: it keeps the flag
            t0 = time.perf_counter()
            if train:
                opt.zero_grad(set_to_none=True)  # type: ignore[union-attr]
                with autocast():
                    out = model(x)
                (out if isinstance(out, torch.Tensor) else out[0]).float().mean().backward()
                opt.step()  # type: ignore[union-attr]
            else:
                with torch.no_grad(), autocast():
                    model(x)
            sync()
            return time.perf_counter() - t0
        return step
    return make


def _compiled_steps(model: Any, x: Any, train: bool, convs: list[tuple[str, Any]],
                    autocast: Callable[[], Any]) -> Callable[[Optional[set[str]]], Callable[[], float]]:
    """_steps for compile=true: for a set of layer names on convtune's kernel, an eval forward of a copy of the model
    with those layers convtune.nn.Conv2d, compiled by torch.compile (the default backend and mode; aot_eager under the
    interpreter, a dry run) and run once to compile it before it is timed. A copy a configuration: a compiled graph is
    traced for one set of classes, and swapping them would recompile at each turn."""
    import copy

    import torch

    from convtune.library.nn import Conv2d as Ours

    names = {name for name, _ in convs}
    sync = torch.cuda.synchronize if x.is_cuda else (lambda: None)
    backend = "inductor" if x.is_cuda else "aot_eager"
    config = torch._dynamo.config
    limit = "recompile_limit" if hasattr(config, "recompile_limit") else "cache_size_limit"
    model.eval()

    for _, m in convs:  # what eager calls cached: not for the copies
        m.forget_calls()

    def make(on_kernel: Optional[set[str]]) -> Callable[[], float]:
        twin = copy.deepcopy(model)
        for name, m in twin.named_modules():
            if name in names:
                object.__setattr__(m, "__class__", Ours if name in (on_kernel or set()) else torch.nn.Conv2d)
        setattr(config, limit, getattr(config, limit) + 1)  # each copy one more graph of the same forward
        compiled = torch.compile(twin, backend=backend)

        def step() -> float:
            t0 = time.perf_counter()
            with torch.no_grad(), autocast():
                compiled(x)
            sync()
            return time.perf_counter() - t0
        step()  # traced and compiled here, outside the timed turns
        return step
    return make
