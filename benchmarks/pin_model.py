"""Pin a model's convolutions, so that the converted model is never slower than torch: every distinct
convolution that torchvision's model runs at one batch size (convtune.nn.problems) goes through
`python promote.py`, where convtune's kernel (its pin or default, and any runs already swept for the shape)
contends with torch's own convolution at the same precision. The pins file then says, per shape, what the
library runs; promote's decisions are runs in the store (experiment "pins <model> b<batch>").

    python benchmarks/pin_model.py --model resnet50 --batch 32 [--store URI] [--pins-file F] [promote overrides]

Needs a CUDA GPU and torchvision (random weights: nothing is downloaded). Extra arguments are passed to every
promote (for example promote.rounds=30).
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import time
from pathlib import Path

import torch

import convtune

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
    a, extra = ap.parse_known_args()
    if not torch.cuda.is_available():
        print("error: needs a CUDA GPU (pins are per GPU)", file=sys.stderr)
        return 2
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


if __name__ == "__main__":
    sys.exit(main())
