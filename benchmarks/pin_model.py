"""Pin a model's convolutions, so that the converted model is never slower than torch: every distinct
convolution that torchvision's model runs at one batch size (convtune.nn.problems) goes through
`python promote.py`, where convtune's kernel (its pin or default, and any runs already swept for the shape)
contends with torch's own convolution at the same precision. The pins file then says, per shape, what the
library runs; promote's decisions are runs in the store (experiment "pins <model> b<batch>").

    python benchmarks/pin_model.py --model resnet50 --batch 32 [--store URI] [--pins-file F] [promote overrides]

With --train it decides the calls that record gradients instead, from whole SGD train steps of the model:
for each shape whose (forward) pin runs convtune's kernel, the converted model against the same model with
that shape's layers handed back to torch.nn.Conv2d (and torch's own model and an identical twin of it, the
noise), interleaved in rotated order over --rounds rounds of --steps steps. The kernel keeps the shape's
training calls only if the converted model was faster in every round; otherwise a "+train" pin says torch.
A train step can be bound by the host rather than the GPU (ResNet-50 at batch 32 on the H200), where a
layer-by-layer contest cannot see what a layer's call costs the step; hence the whole step.

    python benchmarks/pin_model.py --train --model resnet50 --batch 32 [--rounds 5 --steps 40] [--pins-file F]

Needs a CUDA GPU and torchvision (random weights: nothing is downloaded). Extra arguments are passed to every
promote (for example promote.rounds=30).
"""

from __future__ import annotations

import argparse
import copy
import datetime
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.nn.functional as F
import yaml

import convtune
from convtune.library import functional
from convtune.kernels import library_choice, library_variant, pins

ROOT = Path(__file__).resolve().parents[1]


def overrides(p: convtune.problem.ConvProblem, model: str) -> list[str]:
    pair = lambda v: f"[{v[0]},{v[1]}]"  # noqa: E731
    return [f"problem.name={model}_{p.name.replace('.', '_')}", f"problem.description={model} {p.name}",
            f"problem.batch={p.batch}", f"problem.in_channels={p.in_channels}", f"problem.height={p.height}",
            f"problem.width={p.width}", f"problem.out_channels={p.out_channels}", f"problem.kernel_h={p.kernel_h}",
            f"problem.kernel_w={p.kernel_w}", f"problem.stride={pair(p.stride)}", f"problem.padding={pair(p.padding)}",
            f"problem.dilation={pair(p.dilation)}", f"problem.bias={str(p.bias).lower()}", f"problem.init={p.init}"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="resnet50", help="a torchvision.models constructor")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--store", default="sqlite:///mlruns/mlflow.db", help="tracking.uri for promote's decisions")
    ap.add_argument("--pins-file", default=None, help="default: the library's pins file")
    ap.add_argument("--train", action="store_true", help="decide the training calls from whole train steps")
    ap.add_argument("--rounds", type=int, default=5, help="--train: rounds of interleaved steps")
    ap.add_argument("--steps", type=int, default=40, help="--train: steps per model per round")
    a, extra = ap.parse_known_args()
    if a.train:
        if extra:
            print(f"error: --train takes no promote overrides (got {' '.join(extra)})", file=sys.stderr)
            return 2
        if a.rounds < 1 or a.steps < 1:
            print(f"error: --rounds and --steps must be at least 1 (got --rounds {a.rounds} --steps {a.steps})",
                  file=sys.stderr)
            return 2
    if not torch.cuda.is_available():
        print("error: needs a CUDA GPU (pins are per GPU)", file=sys.stderr)
        return 2
    if a.train:
        return pin_training(a.model, a.batch, Path(a.pins_file) if a.pins_file else pins.default_path(), a.rounds,
                            a.steps)
    import torchvision

    model = getattr(torchvision.models, a.model)(weights=None).cuda()
    found = convtune.nn.problems(model, torch.randn(a.batch, 3, 224, 224, device="cuda"))
    del model
    torch.cuda.empty_cache()
    print(f"{torch.cuda.get_device_name()} · {a.model} at batch {a.batch}: {len(found)} distinct convolutions")
    rows, failed = [], 0
    for i, (key, (p, layers)) in enumerate(found.items(), 1):
        cmd = [sys.executable, "promote.py", "problem=tiny", *overrides(p, a.model), "device=cuda",
               f"tracking.uri={a.store}", f"tracking.experiment=pins {a.model} b{a.batch}",
               f"hydra.run.dir=outputs/pin_model/{a.model}_b{a.batch}/{i:02d}", *extra]
        if a.pins_file:
            cmd.append(f"pins_file={a.pins_file}")
        t0 = time.perf_counter()
        r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
        decision = re.search(r"^decision: .*$", r.stdout, re.M)
        winner = re.search(r"^\| ([a-z]+) \(winner\) \| ([^|]+) \|", r.stdout, re.M)
        # role → (re-measured GPU ms, ms from an idle GPU), from promote's contest table
        times = {m[0]: f"{m[1]}/{m[2]}" for m in re.findall(
            r"^\| ([a-z]+)(?: \(winner\))? \| [^|]+ \| [^|]* \| ([0-9.]*) \| \d+ \| ([0-9.]*) \|", r.stdout, re.M)}
        if r.returncode != 0 or not decision:
            failed += 1
            print(f"[{i}/{len(found)}] {key}: promote failed (exit {r.returncode})\n{r.stdout[-2000:]}{r.stderr[-2000:]}")
            continue
        runs = winner[2].strip() if winner else "kept"
        rows.append((key, layers, decision[0], runs, times))
        print(f"[{i}/{len(found)}] {key} ({len(layers)} layer(s), {time.perf_counter() - t0:.0f} s): "
              f"{decision[0]} · ms on GPU/from idle GPU {times}", flush=True)
    print(f"\n{len(rows)} promoted or kept, {failed} failed")
    return 1 if failed else 0


def pin_training(model_name: str, batch: int, pins_file: Path, rounds: int, steps: int) -> int:
    gpu = torch.cuda.get_device_name()
    precision = functional.default_precision()
    # The converted model must run the kernel in training wherever the forward pin says so, whatever "+train"
    # pin is there already: measure against a copy of the pins without any (load refuses a broken file).
    data = pins.load(pins_file)
    for entries in (e for kernels in data["pins"].values() for e in (kernels or {}).values() if e):
        for key in [k for k in entries if k.endswith(pins.TRAIN)]:
            del entries[key]
    scratch = Path(tempfile.mkdtemp()) / "pins.yaml"
    scratch.write_text(yaml.safe_dump(data))
    os.environ[pins.ENV_VAR] = str(scratch)
    functional.forget_choices()
    try:
        return _contest_training(model_name, batch, pins_file, scratch, rounds, steps, gpu, precision)
    finally:
        shutil.rmtree(scratch.parent, ignore_errors=True)


def _contest_training(model_name: str, batch: int, pins_file: Path, scratch: Path, rounds: int, steps: int,
                      gpu: str, precision: str) -> int:
    import torchvision
    import triton

    torch.manual_seed(0)
    x = torch.randn(batch, 3, 224, 224, device="cuda")
    target = torch.randint(0, 1000, (batch,), device="cuda")
    ref = getattr(torchvision.models, model_name)(weights=None).cuda().train()
    found = convtune.nn.problems(ref, x)
    ours = copy.deepcopy(ref)
    convtune.nn.convert(ours)
    contested = []
    for p, layers in found.values():
        value, source = library_choice(scratch, gpu, p, precision)  # what the library's forward runs
        if value != pins.TORCH:
            contested.append((p, layers, value, source))
    print(f"{gpu} · {model_name} at batch {batch}: {len(found)} distinct convolutions, {len(contested)} run "
          f"convtune's kernel (forward pins); each contested in whole train steps, {rounds} rounds × {steps} steps")
    for p, layers, value, source in contested:
        handed_back = copy.deepcopy(ours)
        for name, m in handed_back.named_modules():
            if name in layers:
                m.__class__ = torch.nn.Conv2d
        models = {"torch": ref, "torch twin": copy.deepcopy(ref), "converted": ours, "handed back": handed_back}
        per_round = _interleaved_steps(models, x, target, rounds, steps)
        ratios = [c / h for c, h in zip(per_round["converted"], per_round["handed back"])]
        twin = [t / r for t, r in zip(per_round["torch twin"], per_round["torch"])]
        wins = max(ratios) < 1.0
        decision = value if wins else pins.TORCH
        key = pins.pin_key(p.key(), precision, training=True)
        provenance = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                      "method": f"benchmarks/pin_model.py --train: whole SGD train steps of {model_name} at batch "
                                f"{batch}, {rounds} rounds x {steps} steps, interleaved",
                      "layers": list(layers), "forward_pin": source,
                      "step_ms_converted": [round(v, 4) for v in per_round["converted"]],
                      "step_ms_handed_back": [round(v, 4) for v in per_round["handed back"]],
                      "ratio_per_round": [round(v, 4) for v in ratios],
                      "twin_ratio_per_round": [round(v, 4) for v in twin],
                      "torch_version": str(torch.__version__), "triton_version": str(triton.__version__)}
        pins.write_pin(pins_file, gpu, library_variant(p.layout, p.in_channels), key, decision, provenance)
        print(f"{key} ({', '.join(layers)}): converted / handed back per round "
              f"{' '.join(f'{v:.4f}' for v in ratios)} (twin / torch {' '.join(f'{v:.4f}' for v in twin)}) → "
              f"training calls run {pins.describe(decision)} (written to {pins_file})", flush=True)
        del handed_back
    return 0


def _interleaved_steps(models: dict, x: torch.Tensor, target: torch.Tensor, rounds: int,
                       steps: int) -> dict[str, list[float]]:
    """Per model, the median GPU time of one SGD step (CUDA events, the step synchronised at its end as a
    loop that reads its loss does) in each round; the models' order rotates every step."""
    opts = {k: torch.optim.SGD(m.parameters(), lr=1e-3) for k, m in models.items()}
    names = list(models)

    def step(k: str) -> float:
        begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        begin.record()
        opts[k].zero_grad(set_to_none=True)
        F.cross_entropy(models[k](x), target).backward()
        opts[k].step()
        end.record()
        torch.cuda.synchronize()
        return begin.elapsed_time(end)

    for k in names:  # warm-up: compile, cuDNN heuristics, allocator
        for _ in range(5):
            step(k)
    out: dict[str, list[float]] = {k: [] for k in names}
    for _ in range(rounds):
        got: dict[str, list[float]] = {k: [] for k in names}
        for i in range(steps):
            for k in names[i % len(names):] + names[:i % len(names)]:
                got[k].append(step(k))
        for k in names:
            out[k].append(statistics.median(got[k]))
    return out


if __name__ == "__main__":
    sys.exit(main())
