"""Exploration (GPU): ways to round the gathered input tile to nearest TF32 in implicit_gemm, each over a few
configurations of L1 #50, timed interleaved against truncation; and what each compiles to (TTGIR ops).

    python benchmarks/probe_rounding.py [--problem kernelbench_l1_50]
"""

import argparse
import re
import statistics
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "benchmarks"))

from probe_kernels import load_problem  # noqa: E402

from convtune.measure import bench  # noqa: E402
from convtune.measure.correctness import judge  # noqa: E402
from convtune.kernels import Meta  # noqa: E402
from convtune.kernels import implicit_gemm as ig  # noqa: E402
from convtune.kernels.common import prepare  # noqa: E402
from convtune.measure.one_config import make_inputs  # noqa: E402

MODES = {0: "truncate", 1: "round to nearest"}
METAS = [Meta(256, 128, 16, 8, 4), Meta(128, 128, 16, 4, 6)]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--problem", default="kernelbench_l1_50")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--modes", default="0,1")
    a = ap.parse_args()
    p = load_problem(a.problem)
    dev = torch.device("cuda")
    x, w, b = make_inputs(p, 0, dev)
    g, _ = prepare(x, w, b, p.stride, p.padding, p.dilation, None, 1)
    vec = ig.choose_vec(x, g.w, g.stride[1], g.dilation[1], "tf32")
    calls, results = {}, {}
    for meta in METAS:
        for mode in [int(m) for m in a.modes.split(",")]:
            plan = ig.make_plan(g, True, vec, meta, "tf32")
            plan.constexprs["ROUND_A"] = bool(mode)
            wp = ig.pack_weight(w, g.padding[1], vec, round_tf32=mode != 0)[0]
            out = torch.full(p.output_shape, float("nan"), device=dev)
            fn = (lambda plan=plan, wp=wp, out=out: ig._conv2d_igemm_kernel[plan.grid](x, wp, b, out, **plan.constexprs, LLVM_OPT="O3"))
            try:
                k = fn()
            except Exception as e:  # noqa: BLE001
                print(f"{meta.short()} {MODES[mode]}: {type(e).__name__}: {str(e)[:200]}")
                continue
            torch.cuda.synchronize()
            v = judge(out, p, x, w, b, "tf32", 2e-3, check="float64")
            ir = k.asm.get("ttgir", "")
            ops = {op: len(re.findall(op, ir)) for op in ("async_copy_global_to_local", "warp_group_dot", "local_load", "local_alloc")}
            results[(meta, mode)] = dict(regs=k.n_regs, spills=k.n_spills, smem=k.metadata.shared, ops=ops,
                                         diff=v.metrics["max_abs_err_vs_torch"], match=bool(v.metrics["matches_torch"]), ms=[])
            calls[(meta, mode)] = fn
    one = bench.TimingSettings(rounds=1, reps=10, warmup=1)
    for _ in range(a.rounds):
        for key, fn in calls.items():
            results[key]["ms"].append(bench.time_gpu(fn, one, dev).median_ms)
    print(f"{torch.cuda.get_device_name()} · {a.problem} · VEC={vec} · median of {a.rounds} interleaved rounds × 10 calls")
    print("| meta | mode | ms | vs truncate | max diff vs torch | matches | regs | spills | smem | async copies | wgmma | local_load |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for (meta, mode), r in sorted(results.items(), key=lambda kv: statistics.median(kv[1]["ms"])):
        base = results.get((meta, 0))
        ms = statistics.median(r["ms"])
        rel = f"{100 * (ms / statistics.median(base['ms']) - 1):+.1f} %" if base else "?"
        print(f"| {meta.short()} | {MODES[mode]} | {ms:.4f} | {rel} | {r['diff']:.2g} | {r['match']} | {r['regs']} | {r['spills']} | "
              f"{r['smem']} | {r['ops']['async_copy_global_to_local']} | {r['ops']['warp_group_dot']} | {r['ops']['local_load']} |", flush=True)


if __name__ == "__main__":
    main()
