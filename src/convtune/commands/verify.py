"""`python -m convtune.commands.verify`: every kernel variant × precision on many random shapes, against float64 and
against torch as KernelBench compares; every failure listed with its shape; exit 1 on any.

Run it after editing a kernel, on a GPU: the Triton interpreter cannot see GPU-only bugs (alignment and
contiguity hints, vector widths, layouts), which is why this command exists. Without a GPU it runs a small
sample of small shapes through the interpreter (the test suite does that).

    python -m convtune.commands.verify                                   # 1000 shapes per variant × precision on the GPU
    python -m convtune.commands.verify --shapes 200 --variants NAME --precisions tf32 --workers 8
    python -m convtune.commands.verify --device interpreter --shapes 10  # CPU, small shapes

A case draws: batch 1–16, 1–64 input and 1–1024 output channels, kernel 1–7 (sometimes 11), stride 1–5,
dilation 1–3 (1 for a variant that declares dilation_one), padding from 0 to wider than the kernel (height and width
independently), odd and even sizes, bias or not, an input at an unaligned storage offset, and a launch configuration
(random, or the variant's default for the problem's class, which is what the library runs); for a variant that reads
any layout (any_layout), the input and output laid out NCHW or channels_last. A configuration the GPU cannot hold
(Triton's OutOfResources) is counted as skipped, not failed. Each variant runs the precisions and on the devices it
declares (KernelVariant.precisions, .compute_capability; a Hopper-only variant is left out elsewhere), and a variant
restricted to a family of shapes draws its cases from that family itself (KernelVariant.draw_case, in its module).
A variant that fuses epilogues (KernelVariant.epilogues) also runs --fused cases per dtype, each with a random chain
of 1-4 of its ops, judged against torch running the convolution and then each op.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import random
import sys
import time
from dataclasses import asdict
from typing import Any, Callable, Optional

from convtune.commands.verify_cases import OUTCOMES, Case, case_tensors, draw_first_use, make_cases, read_cases
from convtune.commands.verify_rules import against_rounded_convolution, against_rounding_rule

def run_case(case: Case, device: str) -> dict[str, Any]:
    """Launch one case into a NaN-poisoned output and judge it; never raises for a kernel's failure."""
    import torch

    from convtune.config import tolerance
    from convtune.measure.correctness import HALF_ERROR_MARGIN, judge
    from convtune.kernels import Meta, get_variant
    from convtune.kernels.precision import rounds_operands

    dev = torch.device("cuda" if device == "cuda" else "cpu")
    from convtune.kernels.epilogue import as_kwargs
    from convtune.measure.one_config import make_epilogue

    p, x, w, b = case_tensors(case, dev)
    ep = make_epilogue(p, case.seed, dev)
    variant = get_variant(case.variant)
    meta = Meta(**case.meta) if case.meta else variant.default_meta(case.k, case.stride[1], case.w, case.precision)
    fmt = torch.channels_last if case.layout == "channels_last" else torch.contiguous_format
    out = torch.empty(p.output_shape, device=dev, dtype=x.dtype, memory_format=fmt).fill_(float("nan"))
    result: dict[str, Any] = {"case": case.label(), "meta_used": meta.short()}
    start = time.monotonic()
    try:
        # on a GPU twice: the first launch compiles the binary and checks it on one image, the second goes past
        # Triton's dispatch (host.BoundLaunches), as the library's later calls do; the second one's output is judged
        for _ in range(2 if dev.type == "cuda" else 1):
            launched = variant.launch(x, w, b, case.stride, case.padding, case.dilation, meta, case.precision,
                                      out=out.fill_(float("nan")), **as_kwargs(ep))
        result["llvm_opt"] = launched.llvm_opt
        if dev.type == "cuda":
            torch.cuda.synchronize()
    except Exception as e:  # noqa: BLE001 - a case that cannot run is a result, not a crash
        # OutOfResources: too much shared memory; "out of memory" at module load: too much local memory for the
        # spills of a huge tile (seen: M256-N128-K64 with 2 warps). Either way the configuration does not fit.
        kind = "skipped" if type(e).__name__ == "OutOfResources" or "out of memory" in str(e) else "error"
        return {**result, "outcome": kind, "message": f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}"}
    launched_s = time.monotonic() - start
    v = judge(out, p, x, w, b, case.precision, tolerance(case.precision, p.dtype), check="float64", epilogue=ep)
    if v.ok and "was off by" in v.tags["float64_reference"]:  # right, by the CPU's reference
        return {**result, "outcome": "bad_reference", "message": f"{v.message}; reference: {v.tags['float64_reference']}",
                "launch_s": launched_s}
    mismatch = v.ok and v.metrics.get("matches_torch") == 0.0
    extra: dict[str, Any] = {}
    message = v.message
    if case.dtype != "float32":  # judged as the tracker judges a half-precision run: torch's error is the bar too
        worse = v.ok and not v.metrics["rel_err"] <= HALF_ERROR_MARGIN * v.metrics["torch_rel_err"]
        outcome = "wrong" if not v.ok else "torch_mismatch" if mismatch or worse else "ok"
        if worse:
            message += f"; worse than torch's own error {v.metrics['torch_rel_err']:.3g} by more than {HALF_ERROR_MARGIN}x"
        elif mismatch and ep.chain:
            extra = against_rounded_convolution(out, p, x, w, b, case, ep)
            outcome = "cudnn_rounds_otherwise" if extra.pop("follows_rule") else "torch_mismatch"
            message += (f"; vs torch's chain on the exactly rounded convolution: ours {extra['ours_vs_rounded_exact']:.2g},"
                        f" torch's {extra['torch_vs_rounded_exact']:.2g}")
    elif mismatch and case.precision == "tf32" and v.metrics["torch_rel_err"] < 1e-5:
        outcome = "cudnn_ran_fp32"  # torch chose a true-fp32 algorithm here: no TF32 rounding to agree with
    elif mismatch and rounds_operands(case.precision):
        extra = against_rounding_rule(out, p, x, w, b, case, ep)
        outcome = "cudnn_rounds_otherwise" if extra.pop("follows_rule") else "torch_mismatch"
        message += (f"; vs the exact result of operands rounded to nearest TF32: ours {extra['ours_vs_rounded_exact']:.2g},"
                    f" torch's {extra['torch_vs_rounded_exact']:.2g}")
    else:
        outcome = "wrong" if not v.ok else ("torch_mismatch" if mismatch else "ok")
    return {**result, "outcome": outcome, "message": message, "launch_s": launched_s, "judge_s": time.monotonic() - start - launched_s,
            **{k: v.metrics.get(k) for k in ("rel_err", "max_abs_err_vs_torch", "torch_rel_err")}, **extra}


def _worker(args: tuple[list[Case], str]) -> list[dict[str, Any]]:
    cases, device = args
    if device == "interpreter":
        os.environ["TRITON_INTERPRET"] = "1"
    return [{**asdict(c), **run_case(c, device)} for c in cases]


def run_all(cases: list[Case], device: str, workers: int, max_seconds: Optional[float] = None,
            sink: Optional[Callable[[dict[str, Any]], None]] = None) -> list[dict[str, Any]]:
    """Every case (or as many as fit in max_seconds), failures printed and each result given to `sink` as it
    comes, so that a run cut short keeps what it found."""
    deadline = None if max_seconds is None else time.monotonic() + max_seconds
    results: list[dict[str, Any]] = []
    cases = sorted(cases, key=lambda c: (c.index, c.variant, c.precision))  # a partial run covers every pair alike

    def take(r: dict[str, Any]) -> bool:
        results.append(r)
        if sink is not None:
            sink(r)
        if r["outcome"] in ("wrong", "error", "bad_reference"):  # bad_reference: worth seeing, not a kernel failure
            print(f"  found {r['outcome']}: {r['case']}: {r['message']}", flush=True)
        if len(results) % 100 == 0:
            print(f"  {len(results)}/{len(cases)} cases done", flush=True)
        return deadline is not None and time.monotonic() > deadline

    if workers <= 1:
        for c in cases:
            if take(_worker(([c], device))[0]):
                break
        return results
    import multiprocessing as mp
    from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait

    # One case per worker in flight: after the deadline nothing new starts and those in flight finish, so
    # no worker is killed inside a CUDA call (terminating a pool there hung on the GPU machine).
    todo = iter(cases)
    with ProcessPoolExecutor(workers, mp_context=mp.get_context("spawn")) as pool:
        running = {pool.submit(_worker, ([c], device)) for c in itertools.islice(todo, workers)}
        stop = False
        while running:
            done, running = wait(running, return_when=FIRST_COMPLETED)
            for f in done:
                stop = take(f.result()[0]) or stop
            if not stop:
                running |= {pool.submit(_worker, ([c], device)) for c in itertools.islice(todo, len(done))}
    return results


def report(results: list[dict[str, Any]], strict_torch: bool) -> tuple[str, int]:
    """The failure lines and a table per variant × float32 precision or 16-bit dtype; returns (text, number of
    failures)."""
    from convtune.kernels.precision import promises_torch_match

    lines, rows, failures, expected = [], {}, 0, 0
    for r in results:
        key = (r["variant"], (r["precision"] if r.get("dtype", "float32") == "float32" else r["dtype"])
               + (" fused" if r.get("epilogue") else ""))
        row = rows.setdefault(key, {o: 0 for o in ("cases",) + OUTCOMES})
        row["cases"] += 1
        row[r["outcome"]] += 1
        fails = r["outcome"] in ("wrong", "error") or (strict_torch and r["outcome"] == "torch_mismatch"
                                                         and promises_torch_match(r["precision"]))
        failures += fails
        if r["outcome"] == "torch_mismatch" and not promises_torch_match(r["precision"]):
            expected += 1  # said once, below the table: a precision that does not promise torch's result
        elif r["outcome"] not in ("ok", "skipped", "cudnn_ran_fp32"):
            lines.append(f"{'FAIL' if fails else 'note'} {r['outcome']}: {r['case']}: {r['message']}")
    table = ["| variant | precision or dtype | cases | " + " | ".join(OUTCOMES) + " |", "|---|---|---|" + "---|" * len(OUTCOMES)]
    table += [f"| {v} | {p} | {r['cases']} | " + " | ".join(str(r[o]) for o in OUTCOMES) + " |"
              for (v, p), r in sorted(rows.items())]
    levels: dict[str, int] = {}
    for r in results:
        if r.get("llvm_opt") not in (None, "none"):
            levels[r["llvm_opt"]] = levels.get(r["llvm_opt"], 0) + 1
    if levels:  # kernels/llvm_opt.py: a binary found wrong at Triton's O3 by its one-time check runs at O0
        table.append("binaries by LLVM level (a wrong O3 binary is recompiled at O0): "
                     + ", ".join(f"{k} {v}" for k, v in sorted(levels.items())))
    if expected:
        table.append(f"{expected} torch_mismatch case(s) passed their check against float64 in a precision that does not "
                     "promise torch's result (tf32_trunc truncates operands where torch rounds them): expected, not "
                     "failures")
    return "\n".join(lines + [""] + table), failures


def _report_files(paths: list[str], strict_torch: bool) -> int:
    results: dict[str, dict[str, Any]] = {}
    for path in paths:
        with open(path) as f:
            for n, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                except json.JSONDecodeError:  # a file cut off mid-line by a killed run keeps its complete lines
                    print(f"note: {path}:{n} is not a complete JSON line; skipped", file=sys.stderr)
                    continue
                results[row["case"]] = row
    text, failures = report(list(results.values()), strict_torch)
    print(f"verify: report of {len(results)} distinct cases from {len(paths)} file(s)")
    print(text)
    print(f"{failures} failure(s) in {len(results)} cases" + ("" if failures == 0 else ": see the FAIL lines above"))
    return 1 if failures else 0


def first_use(n: int, seed: int, budget_s: float) -> tuple[str, int]:
    """The library's first-use path on this GPU: `n` random calls with tuning on first use on, in a fresh overlay
    (CONVTUNE_OVERLAY_DIR, a temporary folder) and a CONVTUNE_TUNE_BUDGET_S of `budget_s`. Each call decides (a
    contest of torch against the library's kernels), runs what it decided, and its output is judged as KernelBench
    judges it (torch's own output by allclose, and float64). Returns (the report, the number of failures)."""
    import tempfile

    import torch

    from convtune.config import tolerance
    from convtune.library import dispatch, functional
    from convtune.measure.correctness import judge

    os.environ["CONVTUNE_OVERLAY_DIR"] = tempfile.mkdtemp(prefix="convtune-verify-overlay-")
    os.environ[dispatch.BUDGET_ENV] = f"{budget_s:g}"
    dispatch.tune_on_first_use(True)
    dispatch.forget()
    rng, dev = random.Random(seed), torch.device("cuda")
    lines, failures, kept = [], 0, {}
    for i in range(n):
        case = draw_first_use(rng, i)
        p, x, w, b = case_tensors(case, dev)
        start = time.monotonic()
        try:
            d = functional.decision(x, w, b is not None, case.stride, case.padding, case.dilation, "tf32")
            value = d.value
            out = functional.conv2d(x, w, b, case.stride, case.padding, case.dilation)
            torch.cuda.synchronize()
        except Exception as e:  # noqa: BLE001 - a call that raises is a failure of the library, reported
            failures += 1
            lines.append(f"FAIL {case.label()}: {type(e).__name__}: {str(e).strip()[:200]}")
            continue
        v = judge(out, p, x, w, b, "tf32", tolerance("tf32", p.dtype), check="kernelbench")
        runs = "torch" if value == "torch" else value.short()
        name = "torch" if value == "torch" else value.kernel
        kept[name] = kept.get(name, 0) + 1
        if not v.ok:
            failures += 1
        lines.append(f"{'ok  ' if v.ok else 'FAIL'} {case.label()}: runs {runs} ({time.monotonic() - start:.1f} s"
                     f" with its first-use contest){'' if v.ok else ': ' + v.message}")
    summary = ", ".join(f"{name} {count}" for name, count in sorted(kept.items()))
    lines.append(f"first use: {n} calls tuned on first use ({summary}), {failures} failure(s)")
    return "\n".join(lines), failures


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m convtune.commands.verify", description=__doc__.split("\n\n")[0])
    ap.add_argument("--shapes", type=int, default=None, help="cases per variant × precision (GPU 1000, interpreter 8)")
    ap.add_argument("--variants", default=None, help="comma-separated; default: every variant this device runs "
                    "(a variant that needs another GPU is left out)")
    ap.add_argument("--precisions", default=None, help="comma-separated; default: every precision (float32's math)")
    ap.add_argument("--dtypes", default=None, help="comma-separated: float32, bfloat16, float16; default: all (on the "
                    "interpreter: float32 and float16, it computes bfloat16 wrong); a 16-bit dtype runs the variants "
                    "that declare it")
    ap.add_argument("--fused", type=int, default=None, help="cases per variant that fuses epilogues × dtype, each with "
                    "a random chain of the ops it declares (default: a quarter of --shapes)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--workers", type=int, default=1, help="processes (compiling dominates on a GPU: one per core helps)")
    ap.add_argument("--device", choices=["auto", "cuda", "interpreter"], default="auto")
    ap.add_argument("--strict-torch", action=argparse.BooleanOptionalAction, default=True,
                    help="a mismatch with torch by KernelBench's allclose is a failure, except for tf32_trunc, "
                         "which truncates by design (default: yes)")
    ap.add_argument("--out", default=None, help="write every case and its result as JSON lines")
    ap.add_argument("--replay", default=None, help="run again the cases of an --out file whose outcome was not ok")
    ap.add_argument("--max-seconds", type=float, default=None,
                    help="stop starting cases after this long and report those done (the count says how many)")
    ap.add_argument("--report", nargs="+", default=None, metavar="OUT_FILE",
                    help="run nothing: the report of --out files (several runs with different --seed add up; a "
                         "case found in two files counts once)")
    ap.add_argument("--first-use", type=int, default=0, metavar="N",
                    help="GPU: also N random library calls with tuning on first use on, each judged (default 0)")
    ap.add_argument("--first-use-budget", type=float, default=5.0, help="seconds a first-use contest may take")
    a = ap.parse_args(argv)
    if a.report:
        return _report_files(a.report, a.strict_torch)
    import torch

    device = a.device
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET") != "1" else "interpreter"
    if device == "cuda" and not torch.cuda.is_available():
        print("error: --device cuda: no CUDA device is visible (--device interpreter runs small shapes on the CPU)", file=sys.stderr)
        return 2
    if a.first_use and device != "cuda":
        print("error: --first-use checks the library's GPU path (it runs torch for CPU tensors): it needs a CUDA GPU",
              file=sys.stderr)
        return 2
    if device == "interpreter":
        os.environ["TRITON_INTERPRET"] = "1"
        print("no GPU: small shapes through the Triton interpreter, which cannot see GPU-only bugs", flush=True)
    from convtune.kernels import VARIANTS
    from convtune.kernels.base import DTYPES
    from convtune.kernels.precision import PRECISIONS

    capability = torch.cuda.get_device_capability() if device == "cuda" else None  # None: the interpreter
    variants = a.variants.split(",") if a.variants else [v for v in sorted(VARIANTS) if VARIANTS[v].runs_on(capability)]
    precisions = a.precisions.split(",") if a.precisions else list(PRECISIONS)
    dtypes = a.dtypes.split(",") if a.dtypes else [d for d in DTYPES if device == "cuda" or d != "bfloat16"]
    for name, got, allowed in (("--variants", variants, sorted(VARIANTS)), ("--precisions", precisions, list(PRECISIONS)),
                               ("--dtypes", dtypes, list(DTYPES))):
        bad = [g for g in got if g not in allowed]
        if bad:
            print(f"error: {name} {','.join(bad)} is not allowed: one of {allowed}", file=sys.stderr)
            return 2
    elsewhere = [v for v in variants if not VARIANTS[v].runs_on(capability)]
    if elsewhere:
        needs = "; ".join(f"{v} compute capability {'.'.join(map(str, VARIANTS[v].compute_capability))}"
                          for v in elsewhere)
        print(f"error: --variants {','.join(elsewhere)} run(s) on another GPU only ({needs}); this is "
              f"{torch.cuda.get_device_name() if device == 'cuda' else device}", file=sys.stderr)
        return 2
    shapes = a.shapes if a.shapes is not None else (1000 if device == "cuda" else 8)
    fused = a.fused if a.fused is not None else max(1, shapes // 4)
    cases = make_cases(variants, precisions, shapes, a.seed, small=device == "interpreter", dtypes=tuple(dtypes),
                       fused=fused)
    if a.replay:
        cases = read_cases(a.replay, tuple(o for o in OUTCOMES if o not in ("ok", "skipped")))
    gpu = torch.cuda.get_device_name() if device == "cuda" else "interpreter"
    what = f"replayed from {a.replay}" if a.replay else f"{shapes} per variant × precision or dtype, seed {a.seed}"
    print(f"verify: {len(cases)} cases ({what}) on {gpu}", flush=True)
    out_file = open(a.out, "w") if a.out else None
    try:
        results = run_all(cases, device, a.workers, a.max_seconds,
                          sink=None if out_file is None else lambda r: (out_file.write(json.dumps(r) + "\n"), out_file.flush()))
    finally:
        if out_file is not None:
            out_file.close()
    if len(results) < len(cases):
        print(f"stopped after --max-seconds {a.max_seconds:g}: {len(results)} of {len(cases)} cases run")
    text, failures = report(results, a.strict_torch)
    print(text)
    print(f"{failures} failure(s) in {len(results)} cases" + ("" if failures == 0 else ": see the FAIL lines above"))
    if a.first_use:
        text, missed = first_use(a.first_use, a.seed, a.first_use_budget)
        print(text)
        failures += missed
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
