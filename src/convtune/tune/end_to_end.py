"""tune_model.py's step 4: the model end to end, torch against the converted model and the converted model without
each shape that runs a kernel, in interleaved turns (measure/ab.py); a shape keeps its kernel pin only where the model
is faster with it.
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


def end_to_end(model: Any, x: Any, cfg: DictConfig, shapes: list[Shape], precision: str, gpu: str,
               target: Path) -> tuple[str, dict[str, float], list[str]]:
    """Time torch, the converted model and the converted model without each kernel shape; pin torch for a shape
    the model is not faster with; time torch against the final model again if that changed anything. Returns (the
    table, the metrics, the pin keys dropped).

    With train=true the converted model's training calls run the shapes' plain (forward) pins while this measures
    (dispatch.forward_pins_in_training: a training call otherwise runs a kernel only under a "+train" pin); then each
    kernel shape gets its "+train" pin: its kernel where the train steps were faster with it, else torch."""
    import contextlib

    from convtune.kernels import library_variant
    from convtune import pins
    from convtune.library import dispatch
    from convtune.measure import ab
    from convtune.library.nn import Conv2d as Ours, convert

    trial = cfg.train and not cfg.measure_only
    with dispatch.forward_pins_in_training() if trial else contextlib.nullcontext():
        report = convert(model, example_input=x, leave_torch_layers=False)  # every layer ours: the classes take turns
        on_kernel = {sw.name for sw in report if sw.runs.startswith("convtune")
                     and not (cfg.train and "; in training torch" in sw.runs)}
        convs = [(name, m) for name, m in model.named_modules() if isinstance(m, Ours)]
        kernel_shapes = [s for s in shapes if set(s.layers) & on_kernel]
        steps = _steps(model, x, cfg.train, convs)
        configs = {"torch": steps(set()), "converted": steps(on_kernel)}
        for s in kernel_shapes:
            configs[f"without {s.problem.key()}"] = steps(on_kernel - set(s.layers))
        times = ab.take_turns(configs, cfg.turns, cfg.warmup)
        ran = {s.problem.key(): _training_pin(s, x, gpu, precision) for s in kernel_shapes} if trial else {}
    rows = [_row("torch", times, "torch", len(convs), 0)]
    rows.append(_row("converted", times, "torch", len(convs), len(on_kernel),
                     "training calls on the plain pins" if trial else ""))
    dropped, kept = [], set(on_kernel)
    for s in kernel_shapes:
        without = f"without {s.problem.key()}"
        gain = ab.ratio(times, "converted", without)  # with the shape's kernel / without it
        keep = gain.faster
        verdict = ("faster with it" + (": +train pin" if trial else "") if keep
                   else "not faster with it" if cfg.measure_only else "torch pinned")
        rows.append(_row(without, times, "torch", len(convs), len(on_kernel - set(s.layers)),
                         f"with / without: {gain} → {verdict}"))
        if cfg.measure_only or (keep and not trial):
            continue
        key = pins.pin_key(s.problem.key(), precision, training=cfg.train)
        value = ran[s.problem.key()] if keep else pins.TORCH
        pins.write_pin(target, gpu, library_variant(s.problem.layout, s.problem.in_channels), key, value, {
            "rule": "tune_model: the model was " + ("faster" if keep else "not faster") + " with the kernel",
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "method": f"tune_model.py model={cfg.model} batch={cfg.batch}: {cfg.turns} interleaved "
                      f"{'train steps' if cfg.train else 'eval forwards'}", "layers": list(s.layers),
            "ratio_with_over_without": round(gain.median, 4), "interval": [round(gain.low, 4), round(gain.high, 4)]})
        if not keep:
            dropped.append(key)
            kept -= set(s.layers)
    final = "converted"
    if dropped or (trial and kernel_shapes):  # the library as it now runs: its "+train" pins, outside the trial
        dispatch.forget()
        times = ab.take_turns({"torch": steps(set()), "final": steps(kept)}, cfg.turns, cfg.warmup)
        rows.append(_row("final", times, "torch", len(convs), len(kept),
                         f"{len(dropped)} shape(s) handed to torch" if dropped else "as the library now runs it"))
        final = "final"
    r = ab.ratio(times, final, "torch")
    head = ("| model | median ms per " + ("train step" if cfg.train else "forward") + " | time / torch (95 % interval)"
            " | speedup | layers on convtune | note |\n|---|---|---|---|---|---|")
    outcome = "as converted" if cfg.measure_only else "as tuned"
    table = head + "\n" + "\n".join(rows) + f"\n\n{outcome}: {1 / r.median:.3f}x torch (time ratio {r})"
    numbers = {Metric.SPEEDUP_VS_TORCH: 1 / r.median, Metric.TIME_RATIO: r.median, Metric.TIME_RATIO_LOW: r.low,
               Metric.TIME_RATIO_HIGH: r.high, Metric.STEP_MS_TORCH: 1e3 * statistics.median(times["torch"]),
               Metric.STEP_MS_TUNED: 1e3 * statistics.median(times[final])}
    return table, numbers, dropped


def _training_pin(s: Shape, x: Any, gpu: str, precision: str) -> Any:
    """What the shape's training calls ran while they were measured (within forward_pins_in_training: its "+train"
    pin where it has one, else its plain pin): what its "+train" pin then names."""
    import torch

    from convtune.library import dispatch

    capability = torch.cuda.get_device_capability(x.device) if x.is_cuda else None
    return dispatch.decide(s.problem, gpu, capability, precision, True, x.device).value


def _row(name: str, times: dict[str, list[float]], baseline: str, layers: int, ours: int, note: str = "") -> str:
    from convtune.measure import ab

    ms = 1e3 * statistics.median(times[name])
    if name == baseline:
        return f"| {name} | {ms:.3f} | 1 | 1 | 0 of {layers} | |"
    r = ab.ratio(times, name, baseline)
    return f"| {name} | {ms:.3f} | {r} | {1 / r.median:.3f}x | {ours} of {layers} | {note} |"


def _steps(model: Any, x: Any, train: bool, convs: list[tuple[str, Any]]) -> Callable[[set[str]], Callable[[], float]]:
    """A maker of step functions: for a set of layer names on convtune's kernel, one model step (an eval forward,
    or an SGD step on the output's mean) with those layers convtune.nn.Conv2d and the rest torch.nn.Conv2d, timed on
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
                out = model(x)
                (out if isinstance(out, torch.Tensor) else out[0]).float().mean().backward()
                opt.step()  # type: ignore[union-attr]
            else:
                with torch.no_grad():
                    model(x)
            sync()
            return time.perf_counter() - t0
        return step
    return make
