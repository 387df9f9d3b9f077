"""Converted models in eager mode and under torch.compile, side by side, against torch in the same mode: torchvision
models (random weights, no download), eval forwards, TF32 as torch's default, in interleaved turns (measure/ab.py:
the median per-turn ratio and its 95 % bootstrap interval).

    python benchmarks/compiled_models.py [--models resnet50:32,resnet18:128,vgg16:32,alexnet:256] [--turns 40]
        [--layout nchw|channels_last] [--autocast bfloat16|float16] [--first-use] [--eager-pins-in-graph] [--fold-bn]
        [--graphs] [--append]

Rows per model: eager torch, eager convert(model), torch.compile(model), torch.compile(convert(model)) as the library
decides compiled calls (a "+compiled" pin, else aten's convolution in the graph). The pins are what the library reads
here: the packaged pins and this GPU's overlay (--first-use: a fresh overlay and tuning on first use, whose contests
run in convert's example forward). --eager-pins-in-graph adds two rows that put the eager pins' kernels into the
compiled graph: "kernels only" (those layers as convtune's operator, the rest aten's) and "operator everywhere" (every
convolution as convtune's operator, cuDNN inside it where the pin says torch), which is how a compiled graph held
the library before its calls were decided in context. --autocast runs every forward (convert's example one too) under
torch.autocast in that dtype: the float32 models as users run them in half precision. --append writes the rows to
benchmarks/results/compiled_models.csv (with --autocast, to a file of its own beside it, named for autocast).
--fold-bn converts with the batch norms folded (convert's fold_bn_layers). --graphs adds two rows replayed from CUDA
graphs (convtune.nn.graphed): "graphed torch" (torch's model, against eager torch) and "graphed convert" (the converted
model, against graphed torch), and "compiled torch, reduce-overhead" (torch.compile's CUDA graphs, against compiled
torch); graphed convert's ratios to eager torch and to both compiled torches are printed too.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import os
import statistics
import sys
import tempfile
import time
from typing import Any, Callable

import torch

import convtune
from convtune import pins
from convtune.library import dispatch, functional
from convtune.measure import ab


AUTOCAST: Any = None  # --autocast: the torch dtype every forward runs under torch.autocast in


def autocast() -> Any:
    return torch.autocast("cuda", dtype=AUTOCAST) if AUTOCAST is not None else contextlib.nullcontext()


def step_of(fn: Callable[[torch.Tensor], Any], x: torch.Tensor) -> Callable[[], float]:
    def step() -> float:
        t0 = time.perf_counter()
        with torch.no_grad(), autocast():
            fn(x)
        torch.cuda.synchronize()
        return time.perf_counter() - t0
    return step


def compiled(model: torch.nn.Module, x: torch.Tensor, mode: Any = None) -> tuple[Callable[[], float], float]:
    """A compiled copy's step, compiled here (first call), and the seconds that took."""
    fn = torch.compile(copy.deepcopy(model), mode=mode)
    t0 = time.perf_counter()
    step = step_of(fn, x)
    step()
    return step, time.perf_counter() - t0


@contextlib.contextmanager
def operator_everywhere():
    """Every traced call becomes convtune's operator (the plain pins decide inside it, cuDNN where they say torch)."""
    before = functional._traced_runs_kernel
    functional._traced_runs_kernel = lambda *args: True
    try:
        yield
    finally:
        functional._traced_runs_kernel = before


def one_model(name: str, batch: int, args: argparse.Namespace) -> list[dict]:
    import torchvision

    torch.manual_seed(0)
    base = torchvision.models.get_model(name, weights=None).cuda().eval()
    x = torch.randn(batch, 3, 224, 224, device="cuda")
    if args.layout == "channels_last":
        base, x = base.to(memory_format=torch.channels_last), x.to(memory_format=torch.channels_last)
    ours = copy.deepcopy(base)
    t0 = time.perf_counter()
    with autocast():
        report = convtune.nn.convert(ours, example_input=x, fold_bn_layers=args.fold_bn)
    print(f"\n## {name} b{batch} {args.layout}: convert {time.perf_counter() - t0:.1f} s", flush=True)
    on_kernel = [s for s in report if s.decided.get("eager") not in (None, pins.TORCH)]
    in_graph = [s for s in report if s.decided.get("compiled") not in (None, pins.TORCH)]
    print(f"eager: {len(on_kernel)} of {len(report)} layers on convtune's kernels; compiled: {len(in_graph)}",
          flush=True)
    for s in on_kernel + in_graph:
        print(f"  {s.name}: {s.runs}", flush=True)
    for m in ours.modules():  # what eager calls cached: not for the compiled copies
        if isinstance(m, convtune.nn.Conv2d):
            m.forget_calls()
    torch._dynamo.reset()
    configs: dict[str, Callable[[], float]] = {"eager torch": step_of(base, x), "eager convert": step_of(ours, x)}
    compile_s = {}
    if args.graphs:
        configs["graphed torch"] = step_of(convtune.nn.graphed(base), x)
        configs["graphed convert"] = step_of(convtune.nn.graphed(ours), x)
    configs["compiled torch"], compile_s["compiled torch"] = compiled(base, x)
    if args.graphs:  # torch.compile's own CUDA graphs: the peer of a graphed converted model for a user who compiles
        configs["compiled torch, reduce-overhead"], compile_s["compiled torch, reduce-overhead"] = \
            compiled(base, x, "reduce-overhead")
    configs["compiled convert"], compile_s["compiled convert"] = compiled(ours, x)
    # the operators decide as they run, so the turns too run within eager_pins_in_compile (graphs traced before it
    # hold no operator whose decision it changes: their calls have no "+compiled" pin, or their own)
    with dispatch.eager_pins_in_compile() if args.eager_pins_in_graph else contextlib.nullcontext():
        if args.eager_pins_in_graph:
            configs["compiled, kernels only"], compile_s["compiled, kernels only"] = compiled(ours, x)
            with operator_everywhere():
                configs["compiled, operator everywhere"], compile_s["compiled, operator everywhere"] = \
                    compiled(ours, x)
        times = ab.take_turns(configs, args.turns, args.warmup)
    rows = []
    for config in configs:
        peer = "compiled torch" if config.startswith("compiled") else \
            "graphed torch" if config == "graphed convert" else "eager torch"
        r = ab.ratio(times, config, peer) if config != peer else None
        row = {"model": name, "batch": batch, "layout": args.layout,
               **({"autocast": args.autocast} if args.autocast else {}),
               "config": config + (" (fold bn)" if args.fold_bn and "convert" in config else ""),
               "pins": "first use" if args.first_use else "CONVTUNE_PINS" if os.environ.get("CONVTUNE_PINS") else
               "overlay" if os.environ.get("CONVTUNE_OVERLAY_DIR") else "packaged",
               "layers_on_kernel": len(in_graph) if config == "compiled convert" else
               len(on_kernel) if "convert" in config or config.startswith("compiled, ") else 0,
               "median_ms": round(1e3 * statistics.median(times[config]), 4),
               "speedup_vs_peer": round(1 / r.median, 4) if r else 1.0,
               "interval": f"{1 / r.high:.4f}-{1 / r.low:.4f}" if r else "",
               "compile_s": round(compile_s.get(config, 0.0), 1)}
        rows.append(row)
        if config == "graphed convert":
            for other in ("eager torch", "compiled torch", "compiled torch, reduce-overhead"):
                e = ab.ratio(times, config, other)
                print(f"graphed convert against {other}: {1 / e.median:.3f}x ({1 / e.high:.3f}-{1 / e.low:.3f})",
                      flush=True)
        print(f"| {name} b{batch} | {row['config']} | {row['median_ms']:.3f} ms | {row['speedup_vs_peer']:.3f}x {peer} "
              f"({row['interval'] or 'peer'}) | {row['layers_on_kernel']} layers | compile {row['compile_s']} s |",
              flush=True)
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="resnet50:32,resnet18:128,vgg16:32,alexnet:256")
    ap.add_argument("--turns", type=int, default=40)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--layout", choices=["nchw", "channels_last"], default="nchw")
    ap.add_argument("--autocast", choices=["bfloat16", "float16"], default=None,
                    help="every forward under torch.autocast in this dtype")
    ap.add_argument("--first-use", action="store_true", help="a fresh overlay, with tuning on first use")
    ap.add_argument("--fold-bn", action="store_true", help="convert folds batch norms (fold_bn_layers=True)")
    ap.add_argument("--graphs", action="store_true", help="also both models replayed from CUDA graphs")
    ap.add_argument("--eager-pins-in-graph", action="store_true", help="also the eager pins' kernels in the graph")
    ap.add_argument("--append", action="store_true", help="append the rows to results/compiled_models.csv")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("compiled_models: needs a CUDA GPU", file=sys.stderr)
        return 2
    if args.first_use:
        os.environ["CONVTUNE_OVERLAY_DIR"] = tempfile.mkdtemp(prefix="convtune-overlay-")
        convtune.tune_on_first_use(True)
    global AUTOCAST
    AUTOCAST = getattr(torch, args.autocast) if args.autocast else None
    gpu = torch.cuda.get_device_name()
    print(f"{gpu}, torch {torch.__version__}" + (f", autocast {args.autocast}" if args.autocast else ""), flush=True)
    rows = []
    for spec in args.models.split(","):
        name, _, batch = spec.partition(":")
        rows += one_model(name, int(batch or 32), args)
    if args.append:
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        from results import append

        print(append("autocast_models" if args.autocast else "compiled_models", rows, gpu=gpu,
                     command="python " + " ".join(sys.argv)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
