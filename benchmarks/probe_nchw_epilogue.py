"""Issue 13, session 12: what an NCHW call costs on nhwc_igemm, part by part, on the suite's stride-1 layers.

A pin may now send an NCHW call to nhwc_igemm (kernels.library_choice): the input is copied to channels_last
inside the call and the kernel writes the NCHW output itself (OUT_CL=False). Session 11 saw that path at 0.888 ms
on alexnet_conv2 against 0.691 ms for the kernel on channels_last tensors. Per problem, at nhwc_igemm's default
configuration, side by side in one process (median of interleaved rounds, L2 flushed):

  cl→cl      channels_last input, channels_last output: the kernel alone
  nchw→cl    NCHW input (copied inside), channels_last output
  nchw→nchw  NCHW input (copied inside), NCHW output written by the kernel: what the library runs
  nchw→cl→nchw  NCHW input, channels_last output, then .contiguous(): the copy-back alternative
  implicit_gemm on NCHW at its default, cuDNN NCHW and channels_last (cudnn.benchmark on)

Every output is checked against torch's (allclose 1e-4 at TF32 as KernelBench does, or within the float64
tolerance) before it is timed.

    python benchmarks/probe_nchw_epilogue.py [--problems a,b]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "benchmarks"))

from probe_kernels import FAST, load_problem  # noqa: E402
from probe_nhwc import STRIDE_1  # noqa: E402

from convtune.config import TOLERANCE  # noqa: E402
from convtune.kernels import get_variant, torch_conv  # noqa: E402
from convtune.measure import bench  # noqa: E402
from convtune.measure.correctness import reference, torch_output  # noqa: E402
from convtune.measure.one_config import make_inputs  # noqa: E402

ROUNDS = 5


def probe(name: str, precision: str) -> None:
    p = load_problem(name)
    dev = torch.device("cuda")
    x, w, b = make_inputs(p, 0, dev)
    x_cl = x.contiguous(memory_format=torch.channels_last)
    ref = reference(p, x, w, b)
    theirs, _ = torch_output(p, x, w, b, precision)
    nhwc, ig = get_variant("nhwc_igemm"), get_variant("implicit_gemm")
    m_nhwc = nhwc.default_meta(p.out_channels, p.stride[1], p.width, precision)
    m_ig = ig.default_meta(p.out_channels, p.stride[1], p.width, precision)
    out_nchw = torch.empty(p.output_shape, device=dev)
    args = (p.stride, p.padding, p.dilation)
    calls = {
        "cl→cl": lambda: nhwc.launch(x_cl, w, b, *args, m_nhwc, precision).out,
        "nchw→cl": lambda: nhwc.launch(x, w, b, *args, m_nhwc, precision).out,
        "nchw→nchw": lambda: nhwc.launch(x, w, b, *args, m_nhwc, precision, out=out_nchw).out,
        "nchw→cl→nchw": lambda: nhwc.launch(x, w, b, *args, m_nhwc, precision).out.contiguous(),
        "implicit_gemm nchw": lambda: ig.launch(x, w, b, *args, m_ig, precision).out,
        "cuDNN nchw": lambda: torch_conv.conv2d(x, w, b, *args, precision),
        "cuDNN cl": lambda: torch_conv.conv2d(x_cl, w, b, *args, precision),
    }
    torch.backends.cudnn.benchmark = True
    checked = {}
    for label, call in calls.items():
        y = call()
        torch.cuda.synchronize()
        kb = bool(torch.allclose(y, theirs, atol=1e-4, rtol=1e-4))
        chk = bench.check_output(y, ref, TOLERANCE[precision])
        checked[label] = (kb, chk.ok)
        if not chk.ok:
            print(f"{name:22s} {label:20s} WRONG: rel_err {chk.rel_err:.2e}", flush=True)
    times: dict[str, list[float]] = {k: [] for k in calls if checked[k][1]}
    for _ in range(ROUNDS):  # interleaved, so drift hits every variant alike
        for label in times:
            times[label].append(bench.time_gpu(calls[label], FAST, dev).median_ms)
    med = {k: statistics.median(v) for k, v in times.items()}
    best_cudnn = min(med.get("cuDNN nchw", float("inf")), med.get("cuDNN cl", float("inf")))
    print(f"{name} (nhwc_igemm {m_nhwc.short()}, implicit_gemm {m_ig.short()}):", flush=True)
    for label, ms in med.items():
        kb, ok = checked[label]
        print(f"  {label:20s} {ms:8.4f} ms  {best_cudnn / ms:5.2f}x cuDNN's best  "
              f"{med['cuDNN nchw'] / ms:5.2f}x cuDNN NCHW  allclose {kb}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--problems", default=STRIDE_1)
    ap.add_argument("--precision", default="tf32")
    a = ap.parse_args()
    print(torch.cuda.get_device_name(), torch.__version__, flush=True)
    for name in a.problems.split(","):
        probe(name, a.precision)


if __name__ == "__main__":
    main()
