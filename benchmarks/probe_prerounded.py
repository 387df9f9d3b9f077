"""Issue 13, session 13: what rounding the activation tiles inside nhwc_igemm costs, on the suite's stride-1 layers,
side by side in one process. (Its first run also timed the K loop under tl.range(warp_specialize=True), through a
`WS` constexpr the kernel had then and no longer has: docs/evidence/h200_issue13_prerounded.txt, second part.)

For `tf32` the kernel rounds every A tile to nearest TF32 in registers (cuDNN's rounding; precision.py), so the
tile takes a trip through registers between its load and the MMA. An input rounded beforehand needs none of that
and gives the same bits (rounding is idempotent). Per problem, at the pinned nhwc_igemm configuration of its
channels_last key (the class default where none):

  cl                 channels_last input, the kernel rounds its tiles (today)
  cl pre-rounded     the input rounded beforehand, untimed; the kernel does not round (the gain's upper bound)
  cl round+kernel    our rounding pass (layout.rounded_tf32) then the kernel that does not round
  round pass         the rounding pass alone
  nchw               NCHW in and out, our copy inside the call, the kernel rounds (the library's route today)
  nchw copy+round    NCHW in and out, the copy rounds, the kernel does not
  cuDNN nchw / cl    torch's convolution, cudnn.benchmark on

Every output is checked: the pre-rounded routes must equal the rounding kernel's output bit for bit, and each
route's output is compared with torch's by KernelBench's allclose. The TTGIR line of the dot says whether the
A operand of the warpgroup MMA comes from shared memory (memdesc) or registers.

With --grid, per problem: each configuration of the grid timed both ways on a channels_last input (`cl` and
`cl pre-rounded`, interleaved), then each way's best configuration on both routes next to cuDNN.

    python benchmarks/probe_prerounded.py [--problems a,b] [--grid 'BM=..;BN=..;BK=..;W=..;S=..']
"""

from __future__ import annotations

import argparse
import dataclasses
import re
import statistics
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "benchmarks"))

from probe_kernels import FAST, grid, load_problem  # noqa: E402
from probe_nhwc import STRIDE_1  # noqa: E402

from convtune.kernels import configured_meta, get_variant, layout, nhwc_igemm, pins, torch_conv  # noqa: E402
from convtune.kernels.precision import round_to_tf32  # noqa: E402
from convtune.measure import bench  # noqa: E402
from convtune.measure.correctness import torch_output  # noqa: E402
from convtune.measure.one_config import make_inputs  # noqa: E402

ROUNDS = 5


def dot_line(compiled) -> str:
    ttgir = str((getattr(compiled, "asm", {}) or {}).get("ttgir", ""))
    m = re.search(r"warp_group_dot[^\n]*", ttgir)
    if not m:
        return "no warp_group_dot"
    a_kind = "A in registers" if "dot_op" in m.group(0) else "A in shared memory"
    return f"{a_kind}; warp_specialize ops: {ttgir.count('ttg.warp_specialize')}; {m.group(0)[:220]}"


def setup(name: str):
    """The problem, its inputs (NCHW and channels_last, and the latter rounded to TF32), the weight rounded, torch's
    TF32 output, an NCHW output buffer and the conv arguments."""
    p = load_problem(name)
    dev = torch.device("cuda")
    x, w, b = make_inputs(p, 0, dev)
    x_cl = x.contiguous(memory_format=torch.channels_last)
    xr_cl = round_to_tf32(x_cl).contiguous(memory_format=torch.channels_last)
    theirs, _ = torch_output(p, x, w, b, "tf32")
    return p, dev, x, w, b, x_cl, xr_cl, round_to_tf32(w), theirs, torch.empty(p.output_shape, device=dev), \
        (p.stride, p.padding, p.dilation)


def probe(name: str) -> None:
    p, dev, x, w, b, x_cl, xr_cl, wr, theirs, out_nchw, args = setup(name)
    p_cl = dataclasses.replace(p, layout="channels_last")
    meta, source = configured_meta(get_variant("nhwc_igemm"), pins.default_path(), torch.cuda.get_device_name(), p_cl,
                                   "tf32")

    def kernel(inp, weight, precision, out=None):
        return nhwc_igemm.launch(inp, weight, b, *args, meta, precision, out=out)

    calls = {
        "cl": lambda: kernel(x_cl, w, "tf32"),
        "cl pre-rounded": lambda: kernel(xr_cl, wr, "tf32_trunc"),
        "cl round+kernel": lambda: kernel(layout.rounded_tf32(x_cl), wr, "tf32_trunc"),
        "round pass": lambda: layout.rounded_tf32(x_cl),
        "nchw": lambda: kernel(x, w, "tf32", out=out_nchw),
        "nchw copy+round": lambda: kernel(layout.to_channels_last(x, round_to_nearest_tf32=True), wr, "tf32_trunc",
                                          out=out_nchw),
        "cuDNN nchw": lambda: torch_conv.conv2d(x, w, b, *args, "tf32"),
        "cuDNN cl": lambda: torch_conv.conv2d(x_cl, w, b, *args, "tf32"),
    }
    torch.backends.cudnn.benchmark = True
    print(f"{name}: nhwc_igemm {meta.short()} ({source})", flush=True)
    usable, first = {}, None
    for label, call in calls.items():
        try:
            r = call()
            torch.cuda.synchronize()
        except Exception as e:  # noqa: BLE001 - a variant that does not compile is a result, reported
            print(f"  {label:18s} FAILED: {type(e).__name__}: {str(e).splitlines()[0][:200]}", flush=True)
            continue
        if label == "round pass":
            same = torch.equal(r, xr_cl) and r.stride() == xr_cl.stride()
            print(f"  {label:18s} equals the host rounding: {same}", flush=True)
            usable[label] = call
            continue
        y = r.out if hasattr(r, "out") else r
        if label == "cl":
            first = y.clone()
        if hasattr(r, "compiled") and label in ("cl", "cl pre-rounded"):
            print(f"  {label:18s} {r.n_regs} registers, {r.n_spills} spills; {dot_line(r.compiled)}", flush=True)
        bits = "-" if first is None or label.startswith("cuDNN") else str(torch.equal(y.contiguous(), first.contiguous()))
        kb = bool(torch.allclose(y, theirs, atol=1e-4, rtol=1e-4))
        print(f"  {label:18s} equal to `cl` bit for bit: {bits:5s} allclose to torch: {kb}", flush=True)
        usable[label] = call
    times: dict[str, list[float]] = {k: [] for k in usable}
    for _ in range(ROUNDS):  # interleaved, so drift hits every variant alike
        for label, call in usable.items():
            times[label].append(bench.time_gpu(call, FAST, dev).median_ms)
    med = {k: statistics.median(v) for k, v in times.items()}
    best = min(med.get("cuDNN nchw", float("inf")), med.get("cuDNN cl", float("inf")))
    for label, ms in med.items():
        print(f"  {label:18s} {ms:8.4f} ms  {ms / med.get('cl', ms):5.3f}x `cl`  {best / ms:5.2f}x cuDNN's best  "
              f"{med.get('cuDNN cl', ms) / ms:5.2f}x cuDNN cl", flush=True)


def sweep(name: str, metas) -> None:
    """Each configuration both ways on a channels_last input, then each way's best on both routes with cuDNN."""
    p, dev, x, w, b, x_cl, xr_cl, wr, theirs, out_nchw, args = setup(name)

    def kernel(meta, inp, weight, precision, out=None):
        return nhwc_igemm.launch(inp, weight, b, *args, meta, precision, out=out).out

    def checked(call) -> bool:
        y = call()
        torch.cuda.synchronize()
        return bool(torch.allclose(y, theirs, atol=1e-4, rtol=1e-4))

    rows = {}
    for meta in metas:
        if meta.BLOCK_M * meta.BLOCK_N > 128 * 32 * meta.num_warps:  # > 128 accumulator registers a thread: spills
            continue
        calls = {"cl": lambda m=meta: kernel(m, x_cl, w, "tf32"),
                 "cl pre-rounded": lambda m=meta: kernel(m, xr_cl, wr, "tf32_trunc")}
        ys = {k: c() for k, c in calls.items()}
        torch.cuda.synchronize()
        same = torch.equal(ys["cl"], ys["cl pre-rounded"])
        ok = bool(torch.allclose(ys["cl"], theirs, atol=1e-4, rtol=1e-4))
        times: dict[str, list[float]] = {k: [] for k in calls}
        for _ in range(3):
            for k, c in calls.items():
                times[k].append(bench.time_gpu(c, FAST, dev).median_ms)
        rows[meta] = {k: statistics.median(v) for k, v in times.items()}
        print(f"  {name:20s} {meta.short():22s} cl {rows[meta]['cl']:8.4f}  pre-rounded {rows[meta]['cl pre-rounded']:8.4f} "
              f"ms  bit-equal {same}  allclose {ok}", flush=True)
    best_r = min(rows, key=lambda m: rows[m]["cl"])
    best_p = min(rows, key=lambda m: rows[m]["cl pre-rounded"])
    finals = {
        f"cl {best_r.short()}": lambda: kernel(best_r, x_cl, w, "tf32"),
        f"cl pre-rounded {best_p.short()}": lambda: kernel(best_p, xr_cl, wr, "tf32_trunc"),
        f"cl round+kernel {best_p.short()}": lambda: kernel(best_p, layout.rounded_tf32(x_cl), wr, "tf32_trunc"),
        f"nchw {best_r.short()}": lambda: kernel(best_r, x, w, "tf32", out=out_nchw),
        f"nchw copy+round {best_p.short()}": lambda: kernel(best_p, layout.to_channels_last(x, round_to_nearest_tf32=True),
                                                             wr, "tf32_trunc", out=out_nchw),
        "cuDNN nchw": lambda: torch_conv.conv2d(x, w, b, *args, "tf32"),
        "cuDNN cl": lambda: torch_conv.conv2d(x_cl, w, b, *args, "tf32"),
    }
    torch.backends.cudnn.benchmark = True
    ok = {k: checked(c) for k, c in finals.items()}
    times = {k: [] for k in finals}
    for _ in range(ROUNDS):
        for k, c in finals.items():
            times[k].append(bench.time_gpu(c, FAST, dev).median_ms)
    med = {k: statistics.median(v) for k, v in times.items()}
    best = min(med["cuDNN nchw"], med["cuDNN cl"])
    print(f"{name}: best configurations, side by side", flush=True)
    for k, ms in med.items():
        print(f"  {k:40s} {ms:8.4f} ms  {best / ms:5.2f}x cuDNN's best  {med['cuDNN cl'] / ms:5.2f}x cuDNN cl  "
              f"allclose {ok[k]}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--problems", default=STRIDE_1)
    ap.add_argument("--grid", default="", help="sweep this grid both ways (see the module's doc)")
    a = ap.parse_args()
    print(torch.cuda.get_device_name(), torch.__version__, flush=True)
    for name in a.problems.split(","):
        if a.grid:
            sweep(name, grid(a.grid))
        else:
            probe(name)


if __name__ == "__main__":
    main()
