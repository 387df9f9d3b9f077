"""Host overhead of the library call on a pinned shape: convtune.conv2d vs the launcher vs a bare launch; and,
where a pin says torch, convtune.conv2d against F.conv2d, and convtune.nn.Conv2d against torch.nn.Conv2d (the same
layer object taking turns as either class, without and with gradients).

    python benchmarks/overhead.py      (GPU; the problem is tiny so the GPU work is negligible)

Each variant is called back to back many times with one synchronize at the end, so the time per call is
the host-side cost (the GPU queue never drains for so small a kernel).
"""

import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
import triton

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

import convtune  # noqa: E402
from convtune.kernels import implicit_gemm as ig  # noqa: E402
from convtune import functional  # noqa: E402
from convtune.kernels import pins  # noqa: E402
from convtune.kernels.common import Meta, prepare  # noqa: E402
from convtune.problem import ConvProblem  # noqa: E402

N_CALLS = 3000


def per_call_us(fn) -> float:
    for _ in range(200):
        fn()
    torch.cuda.synchronize()
    best = float("inf")
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(N_CALLS):
            fn()
        torch.cuda.synchronize()
        best = min(best, (time.perf_counter() - t0) / N_CALLS * 1e6)
    return best


def main() -> None:
    x = torch.rand(1, 4, 16, 16, device="cuda")
    w = torch.rand(16, 4, 3, 3, device="cuda")
    b = torch.rand(16, device="cuda")
    meta = Meta(64, 16, 32, 4, 2)
    out = torch.empty(1, 16, 16, 16, device="cuda")
    g, _ = prepare(x, w, b, 1, 1, 1, out, 1)
    plan = ig.make_plan(g, True, 1, meta, "tf32")

    def bare():  # the kernel call alone, every argument prepared in advance
        ig._conv2d_igemm_kernel[plan.grid](x, w, b, out, **plan.constexprs, LLVM_OPT="O3")

    def bare_alloc():  # what any conv2d call must do at least: allocate its output, then launch
        o = torch.empty(plan.out_shape, device="cuda")
        ig._conv2d_igemm_kernel[plan.grid](x, w, b, o, **plan.constexprs, LLVM_OPT="O3")

    def launcher():
        ig.launch(x, w, b, 1, 1, 1, meta, "tf32", out=out)

    def library():
        convtune.conv2d(x, w, b, stride=1, padding=1)

    torch.testing.assert_close(convtune.conv2d(x, w, b, 1, 1), torch.nn.functional.conv2d(x, w, b, 1, 1),
                               rtol=2e-3, atol=2e-3)
    rows = [(name, per_call_us(fn)) for name, fn in (
        ("bare kernel launch", bare), ("bare launch + torch.empty", bare_alloc),
        ("implicit_gemm.launch", launcher), ("convtune.conv2d", library),
        ("torch F.conv2d (cuDNN)", lambda: torch.nn.functional.conv2d(x, w, b, 1, 1)))]
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, triton {triton.__version__}; "
          f"min over 5 repeats of {N_CALLS} calls")
    for name, us in rows:
        print(f"{name:22s} {us:7.2f} us/call   (+{us - rows[0][1]:.2f} us over the bare launch)")

    # the same shape pinned to torch (a temporary pins file): what convtune adds over calling torch directly
    key = pins.pin_key(ConvProblem("", 1, 4, 16, 16, 16, 3, 3, padding=(1, 1)).key(), functional.default_precision())
    with tempfile.TemporaryDirectory() as d:
        pins.write_pin(Path(d) / "pins.yaml", torch.cuda.get_device_name(), "implicit_gemm", key, pins.TORCH, {})
        os.environ[pins.ENV_VAR] = str(Path(d) / "pins.yaml")
        functional.forget_choices()
        with torch.no_grad():
            pinned = [(name, per_call_us(fn)) for name, fn in (
                ("torch F.conv2d", lambda: torch.nn.functional.conv2d(x, w, b, 1, 1)),
                ("convtune.conv2d", lambda: convtune.conv2d(x, w, b, stride=1, padding=1)))]
        # The module: one layer whose class alternates between torch.nn.Conv2d and convtune.nn.Conv2d (the same
        # object, parameters and input), in blocks of calls, so that the host's drift (several us between
        # processes here) hits both alike; without and with gradients (a training call records a node).
        layer = convtune.nn.Conv2d(4, 16, 3, padding=1).cuda()
        modules = {}
        for mode, ctx in (("no grad", torch.no_grad), ("training calls", torch.enable_grad)):
            with ctx():
                modules[mode] = alternating(layer, x)
        del os.environ[pins.ENV_VAR]
        functional.forget_choices()
    print("pinned to torch:")
    print(f"{'torch F.conv2d':22s} {pinned[0][1]:7.2f} us/call")
    print(f"{'convtune.conv2d':22s} {pinned[1][1]:7.2f} us/call   ({pinned[1][1] - pinned[0][1]:+.2f} us over F.conv2d)")
    for mode, (theirs, ours, diff) in modules.items():
        print(f"module, {mode}: torch.nn.Conv2d {theirs:6.2f} us/call, convtune.nn.Conv2d {ours:6.2f} us/call, "
              f"median paired difference {diff:+.2f} us")


def alternating(layer: torch.nn.Module, x: torch.Tensor, blocks: int = 30, calls: int = 1000) -> tuple[float, float, float]:
    """Median us per call of `layer` as torch.nn.Conv2d and as convtune.nn.Conv2d, blocks of `calls` calls
    taking turns, and the median of the per-block differences (convtune minus torch)."""
    def block(cls: type) -> float:
        object.__setattr__(layer, "__class__", cls)  # not convtune's __setattr__, which drops cached decisions
        for _ in range(100):
            layer(x)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(calls):
            layer(x)
        torch.cuda.synchronize()
        return (time.perf_counter() - t0) / calls * 1e6
    theirs, ours = [], []
    for _ in range(blocks):
        theirs.append(block(torch.nn.Conv2d))
        ours.append(block(convtune.nn.Conv2d))
    return (statistics.median(theirs), statistics.median(ours),
            statistics.median(o - t for o, t in zip(ours, theirs)))

if __name__ == "__main__":
    main()
