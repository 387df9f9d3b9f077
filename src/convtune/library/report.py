"""What `convert` reports per convolution (Swap) and for the model (Report): what each layer runs for the example
input, in which context, and what it fuses; and the pins' decisions behind each line."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

import torch

from convtune.errors import UnsupportedProblem
from convtune.library import fused
from convtune.library.call_key import default_precision
from convtune.library.functional import decision
from convtune.pins import TORCH


@dataclass
class Swap:
    """One convolution of a converted model and what it runs (`left`: handed back to torch.nn.Conv2d); `decided`:
    for the example input, what each context's calls run (eager, train, compiled: a pins.KernelPin or pins.TORCH),
    where the pins decide it."""
    name: str
    layer: str
    runs: str
    left: bool = False
    decided: dict[str, Any] = field(default_factory=dict)  # and "fused": the eager calls' fused problem, if any
    pattern: str = "conv"  # what the layer became: "conv", or "conv+bn" with the batch norm it folds (its name)


class Report(list):
    """convert's answer: a Swap per convolution; str() is a table."""

    def __str__(self) -> str:
        width = max([len(s.name) for s in self] + [5])
        lines = [f"{'layer':<{width}}  runs", f"{'-' * width}  ----"]
        lines += [f"{s.name:<{width}}  {s.runs}   [{s.pattern}: {s.layer}]" for s in self]
        # a layer whose fused problem runs a kernel runs it for its folded calls, whatever its plain problem runs
        fused_ = [s.decided.get("fused") not in (None, TORCH) for s in self]
        ours = sum(s.runs.startswith("convtune") or f for s, f in zip(self, fused_))
        torch_ = sum(s.runs.startswith("torch") and not f for s, f in zip(self, fused_))
        idle = len(self) - ours - torch_
        left = sum(s.left for s in self)
        folds = sum(s.pattern != "conv" for s in self)
        return "\n".join(lines + [f"{len(self) - left} convolution(s) swapped"
                                  + (f" and {left} left as torch.nn.Conv2d" if left else "")
                                  + f": {ours} run convtune's kernel, {torch_} torch's"
                                  + (f", {idle} not called by the example input" if idle else "")
                                  + (f"; {folds} fold a batch norm" if folds else "")
                                  + (f"; no batch norm folded: {self.unfolded}" if self.unfolded else "")])

    unfolded: Optional[str] = None  # why convert looked for no batch norm to fold


def runs_of(m: Any, x: Optional[torch.Tensor], ran: bool) -> tuple[str, bool, dict[str, Any]]:
    """The report line of `m` for the input `x` it got (None: not called, or no example), whether that input
    runs torch in every context (eager calls without gradients, training calls, compiled calls: so that convert may
    leave it to torch), and what each context runs where the pins decide it.
    A CPU input decides nothing: the pins decide on the GPU, where the model may yet go."""
    why = m.why_torch(x)
    if why is not None:
        return f"torch: {why}", x is not None and (x.is_cuda or m.why_torch() is not None), {}
    if x is None:
        return ("not called by the example input" if ran else "convtune (configuration per input shape: pins)"), \
            False, {}
    try:
        d = decision(x, m.weight, has_bias(m), m.stride, m.padding, m.dilation, default_precision())
        value, source = d.value, d.source
        t = decision(x, m.weight, m.bias is not None, m.stride, m.padding, m.dilation, default_precision(), training=True)
        in_training = (t.value, t.source)  # training folds nothing: the layer's own bias
        c = decision(x, m.weight, has_bias(m), m.stride, m.padding, m.dilation, default_precision(), compiled=True)
    except UnsupportedProblem as e:
        return f"torch: {e}", True, {}
    # the source says which rule decided (library/dispatch.py), and why; a kernel's line names it and its configuration
    runs = f"torch ({source})" if value == TORCH else f"convtune {value.short()} ({source})"
    if in_training[1] != source:  # a "+train" pin decides this shape's calls that record gradients
        runs += "; in training " + ("torch" if in_training[0] == TORCH else f"convtune {in_training[0].short()}") + \
            f" ({in_training[1]})"
    # inside torch.compile its "+compiled" pin decides (torch where it has none): said where that differs from eager
    if c.value != value or c.rule != "torch":
        runs += "; under torch.compile " + (f"convtune {c.value.short()} ({c.source})" if c.value != TORCH else
                                            f"torch ({c.source})" if c.rule != "torch" else
                                            "torch (no pin measured under compile: tune_model.py compile=true)")
    decided = {"eager": value, "train": in_training[0], "compiled": c.value}
    return runs, all(v == TORCH for v in decided.values()), decided


def fused_runs_of(m: Any, x: Optional[torch.Tensor], chain: tuple[str, ...]) -> tuple[str, Any]:
    """What the report says of what a layer fuses (`chain`: relu, or add,relu) for the input it got: the kernel the pins
    run for the fused problem (library/fused.py, library/residual.py), or torch's ops after the convolution; and what
    runs for that problem (None: nothing decided)."""
    if x is None or m.why_torch(x) is not None:
        return "", None
    what = "its ReLU" if chain == fused.RELU.chain else "its residual add and ReLU"
    try:
        d = fused.decision(m, x, m.weight, default_precision(), chain)
    except UnsupportedProblem as e:
        return f"; {what} run as torch's ({e})", TORCH
    return f"; with {what}: {'torch' if d.value == TORCH else 'convtune ' + d.value.short()} ({d.source})", d.value


def has_bias(m: torch.nn.Module) -> bool:
    """Whether the layer's calls without gradients compute with a bias: its own, or a folded batch norm's."""
    return m.bias is not None or getattr(m, "_bn", None) is not None
