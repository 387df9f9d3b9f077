"""Issue 13, first step: the channels_last implicit GEMM (kernels/nhwc_igemm.py) on the suite's stride-1
layers, next to cuDNN in both layouts, in one GPU process. Per problem: a grid of configurations, each checked
(float64, and torch's TF32 output by KernelBench's allclose) and timed on a channels_last input; then the best
one timed again on an NCHW input (the conversion inside the timed call), and its compiled code searched for
Hopper's warpgroup MMA (TTGIR warp_group_dot, PTX wgmma) against the NCHW kernel's.

    python benchmarks/probe_nhwc.py --out nhwc.jsonl [--problems a,b] [--grid 'BM=..;BN=..;BK=..;W=..;S=..']
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "benchmarks"))

from probe_kernels import FAST, grid, load_problem  # noqa: E402

from convtune.config import TOLERANCE  # noqa: E402
from convtune.kernels import get_variant, nhwc_igemm  # noqa: E402
from convtune.measure import bench  # noqa: E402
from convtune.measure.correctness import reference, torch_output  # noqa: E402
from convtune.measure.one_config import cudnn_baseline, make_inputs  # noqa: E402

STRIDE_1 = ("alexnet_conv2,alexnet_conv3,alexnet_conv4,alexnet_conv5,vgg16_conv3_2,resnet50_layer1_1x1,"
            "resnet50_layer2_3x3")


def mma_kind(compiled) -> str:
    """What the compiled kernel's dot became: wgmma (Hopper's warpgroup MMA), mma (mma.sync), or fma."""
    asm = getattr(compiled, "asm", {}) or {}
    ttgir, ptx = str(asm.get("ttgir", "")), str(asm.get("ptx", ""))
    if "warp_group_dot" in ttgir or "wgmma.mma_async" in ptx:
        return "wgmma"
    if "mma.sync" in ptx:
        return "mma.sync"
    return "fma"


def probe(name: str, metas, precision: str, log, weight_tma: bool = False) -> None:
    p = load_problem(name)
    dev = torch.device("cuda")
    x, w, b = make_inputs(p, 0, dev)
    ref = reference(p, x, w, b)
    theirs, _ = torch_output(p, x, w, b, precision)
    base = cudnn_baseline(p, x, w, b, precision, FAST)
    x_cl = x.contiguous(memory_format=torch.channels_last)
    rows = []

    def call(inp, meta):
        return nhwc_igemm.launch(inp, w, b, p.stride, p.padding, p.dilation, meta, precision, weight_tma=weight_tma)

    for meta in metas:
        row = {"problem": name, "precision": precision, "weight_tma": weight_tma, **meta.as_dict(), **base}
        try:
            t0 = time.perf_counter()
            launched = call(x_cl, meta)
            torch.cuda.synchronize()
            row["compile_s"] = round(time.perf_counter() - t0, 2)
            chk = bench.check_output(launched.out, ref, TOLERANCE[precision])
            kb = bool(torch.allclose(launched.out, theirs, atol=1e-4, rtol=1e-4))
            row.update(ok=chk.ok, kernelbench_allclose=kb, rel_err=chk.rel_err, regs=launched.n_regs,
                       spills=launched.n_spills, smem=launched.shared_bytes, mma=mma_kind(launched.compiled))
            if chk.ok:
                t = bench.time_gpu(lambda: call(x_cl, meta), FAST, dev)
                row.update(ms=t.median_ms, cv=t.cv, tflops=p.flops / t.median_ms / 1e9,
                           vs_cudnn_cl=base["cudnn_channels_last_ms"] / t.median_ms)
        except Exception as e:  # noqa: BLE001 - a failing config is a result
            row.update(ok=False, error=f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:200])
        rows.append(row)
        log.write(json.dumps(row) + "\n")
        log.flush()
        print(f"{name:22s} {'tma ' if weight_tma else ''}{meta.short():22s} {row.get('ms', float('nan')):8.4f} ms  {row.get('mma', '')} "
              f"regs={row.get('regs')} spills={row.get('spills')} allclose={row.get('kernelbench_allclose')} "
              f"{row.get('error', '')}", flush=True)
    timed = [r for r in rows if "ms" in r]
    if not timed:
        return
    best = min(timed, key=lambda r: r["ms"])
    meta = next(m for m in metas if m.as_dict() == {k: best[k] for k in m.as_dict()})
    t_nchw = bench.time_gpu(lambda: call(x, meta), FAST, dev)  # conversion to channels_last inside
    ours_nchw = get_variant("implicit_gemm")  # today's NCHW kernel at its default, for the MMA comparison
    from convtune.kernels.implicit_gemm import default_meta
    dm = default_meta(p.out_channels, p.stride[1], p.width, precision)
    old = ours_nchw.launch(x, w, b, p.stride, p.padding, p.dilation, dm, precision)
    t_old = bench.time_gpu(lambda: ours_nchw.launch(x, w, b, p.stride, p.padding, p.dilation, dm, precision), FAST, dev)
    summary = {"summary": name, "weight_tma": weight_tma, "best": meta.short(), "ms_cl": best["ms"], "ms_from_nchw": t_nchw.median_ms,
               "cudnn_nchw_ms": base["cudnn_nchw_ms"], "cudnn_cl_ms": base["cudnn_channels_last_ms"],
               "vs_cudnn_cl": best["vs_cudnn_cl"], "vs_cudnn_best_from_nchw": base["cudnn_ms"] / t_nchw.median_ms,
               "tflops": best["tflops"], "mma": best["mma"], "allclose": best["kernelbench_allclose"],
               "nchw_kernel_ms": t_old.median_ms, "nchw_kernel_mma": mma_kind(old.compiled)}
    log.write(json.dumps(summary) + "\n")
    print("SUMMARY " + json.dumps(summary), flush=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--problems", default=STRIDE_1)
    ap.add_argument("--grid", default="BM=64,128;BN=64,128;BK=32;W=4,8;S=3,4")
    ap.add_argument("--precision", default="tf32")
    ap.add_argument("--weight-tma", choices=("off", "on", "both"), default="off",
                    help="load the weight tiles through a TMA descriptor (both: each problem twice, side by side)")
    a = ap.parse_args()
    modes = {"off": [False], "on": [True], "both": [False, True]}[a.weight_tma]
    print(torch.cuda.get_device_name(), torch.__version__, flush=True)
    with open(a.out, "a") as log:
        for name in a.problems.split(","):
            for tma in modes:
                probe(name, grid(a.grid), a.precision, log, tma)


if __name__ == "__main__":
    main()
