"""tune_model.py's step 4: the model end to end, torch against the converted model and the converted model without
each shape that runs a kernel, in interleaved turns (measure/ab.py); a shape keeps its kernel pin only where the model
is faster with it. In the context the pins are for: eager forwards, train steps (train=true) or, with compile=true,
forwards of the model compiled by torch.compile against the compiled torch model.
"""

from __future__ import annotations

import datetime
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from dataclasses import dataclass
from typing import Any

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
            report = convert(model, example_input=x, leave_torch_layers=False)  # every layer ours: classes take turns
        on_kernel = {sw.name for sw in report if sw.decided.get(context, pins.TORCH) != pins.TORCH}
        ran = {sw.name: sw.decided[context] for sw in report if sw.name in on_kernel}
        convs = [(name, m) for name, m in model.named_modules() if isinstance(m, Ours)]
        kernel_shapes = [s for s in shapes if set(s.layers) & on_kernel]
        steps = (_compiled_steps if cfg.compile else _steps)(model, x, cfg.train, convs, lambda: autocasting(cfg, x))
        configs = {"torch": steps(set()), "converted": steps(on_kernel)}
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
        dispatch.forget()
        steps = (_compiled_steps if cfg.compile else _steps)(model, x, cfg.train, convs, lambda: autocasting(cfg, x))
        times = ab.take_turns({"torch": steps(set()), "final": steps(kept)}, cfg.turns, cfg.warmup)
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


def _row(name: str, times: dict[str, list[float]], baseline: str, layers: int, ours: int, note: str = "") -> str:
    from convtune.measure import ab

    ms = 1e3 * statistics.median(times[name])
    if name == baseline:
        return f"| {name} | {ms:.3f} | 1 | 1 | 0 of {layers} | {note} |"
    r = ab.ratio(times, name, baseline)
    return f"| {name} | {ms:.3f} | {r} | {1 / r.median:.3f}x | {ours} of {layers} | {note} |"


def _steps(model: Any, x: Any, train: bool, convs: list[tuple[str, Any]],
           autocast: Callable[[], Any]) -> Callable[[set[str]], Callable[[], float]]:
    """A maker of step functions: for a set of layer names on convtune's kernel, one model step (an eval forward,
    or an SGD step on the output's mean; its forward within `autocast()`) with those layers convtune.nn.Conv2d and the
    rest torch.nn.Conv2d, timed on
    the host up to a synchronize (what a loop waits for). One module and one optimizer for all: the same
    parameters and tensors, so the layers' classes are the one difference."""
    import torch

    from convtune.library.nn import Conv2d as Ours

    opt = torch.optim.SGD(model.parameters(), lr=1e-6) if train else None
    model.train(train)
    sync = torch.cuda.synchronize if x.is_cuda else (lambda: None)

    def make(on_kernel: set[str]) -> Callable[[], float]:
        classes = [(m, Ours if name in on_kernel else torch.nn.Conv2d) for name, m in convs]

        def step() -> float:
            for m, c in classes:  # object.__setattr__: convtune's __setattr__ would drop the layer's cached decision
                object.__setattr__(m, "__class__", c)
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
                    autocast: Callable[[], Any]) -> Callable[[set[str]], Callable[[], float]]:
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

    def make(on_kernel: set[str]) -> Callable[[], float]:
        twin = copy.deepcopy(model)
        for name, m in twin.named_modules():
            if name in names:
                object.__setattr__(m, "__class__", Ours if name in on_kernel else torch.nn.Conv2d)
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
