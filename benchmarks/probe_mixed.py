"""Issue 13, session 27: alexnet_conv4 (and conv3) with two tile shapes, 256 output channels a tile and 128 for the rest.

C_out = 384 is three 128-wide tiles, so the pins run M128-N128-w4 at two programs an SM, and the A tile each
program gathers is gathered three times per row block. A 128 x 256 tile at one program an SM does the same work a
wave faster: the waves probe (docs/evidence/h200_issue13_waves.txt) measured 0.0787 ms a wave of 132 tiles of
128 x 256 (alexnet_conv5, K 3456, nhwc_preround M128-N256-w8-s4) against 0.0909 ms a wave of 264 tiles of 128 x 128
(alexnet_conv4, the same K, M128-N128-w4-s3): the same outputs, 13 % less time. But 384 is not a multiple of 256, and
a 256-wide second tile wastes a third of its MMAs (alexnet_conv4 at M128-N256: 0.47-0.52 ms). So: channels 0-255 in
256-wide tiles and 256-383 in 128-wide ones, as two launches on two streams (the 256-wide tiles on the call's
stream, one program an SM; the 128-wide ones beside them, two an SM), so that the second fills the SMs the first's
last wave leaves. Both launches run nhwc_streamk's tile functions on an input rounded to nearest TF32 first, as
nhwc_preround's is.

Prediction, written before the run (kernel alone, on a rounded channels_last input; the pin about 0.364 ms):
two streams ideally 338 x 0.0787 / 132 + 338 x 0.0909 / 264 = 0.318 ms, so 0.325-0.345 (-5 to -11 %); one launch w8
0.35-0.37 (the 256 x 128 tile ran 0.117 ms a wave in session 13's sweep: little or no gain); one launch w4 0.33-0.36
if both tile kinds fit two programs an SM, worse if not. The NCHW route adds its copy (~0.040-0.048 ms): with two
streams alexnet_conv4 NCHW 0.37-0.39 ms, 0.91-0.96x cuDNN channels_last (0.357).

First run (gpu_session27a.sh): one launch of both tile kinds (a branch a kind, w8: M128-N256 and M256-N128; w4:
M64-N256 and M128-N128) did not compile as written (a variable of two shapes across the branches), and written with
a function a branch it would not fit: Triton gave each branch's pipeline its own shared memory (393,280 bytes for two
M128-N256-s4 loops, 245,816 for M64-N256-s3 and M128-N128-s3). So only the two-launch forms are measured. In that
run the pin's call took 0.4075 ms (NCHW) and cuDNN channels_last 0.3641, not the 0.364 and 0.357 above.

    python benchmarks/probe_mixed.py [--problems alexnet_conv4,alexnet_conv3]
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

import torch
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "benchmarks"))

from probe_kernels import load_problem, side_by_side  # noqa: E402

from convtune.kernels import Meta, get_variant, library_choice, pins, torch_conv  # noqa: E402
from convtune.kernels.common import geometry, safe_stages  # noqa: E402
from convtune.kernels.layout import rounded_tf32, to_channels_last  # noqa: E402
from convtune.kernels.nhwc_igemm import GROUP_M, packed_weight  # noqa: E402
from convtune.kernels.nhwc_streamk import _store_tile, _tile_at, _tile_sum, resident_programs  # noqa: E402
from convtune.kernels.precision import dot_precision  # noqa: E402
from convtune.measure.correctness import torch_output  # noqa: E402
from convtune.measure.one_config import make_inputs  # noqa: E402


@triton.jit
def _region(x_ptr, w_ptr, b_ptr, y_ptr, M, tile, N_FROM: tl.constexpr, N_COUNT: tl.constexpr,
            C: tl.constexpr, H: tl.constexpr, W: tl.constexpr, C_OUT: tl.constexpr, OH: tl.constexpr,
            OW: tl.constexpr, KH: tl.constexpr, KW: tl.constexpr, PH: tl.constexpr, PW: tl.constexpr,
            HAS_BIAS: tl.constexpr, PRECISION: tl.constexpr, OUT_CL: tl.constexpr, BLOCK_M: tl.constexpr,
            BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP: tl.constexpr):
    """Tile `tile` of the region of channels N_FROM .. N_FROM + N_COUNT - 1, whole: nhwc_streamk's tile functions."""
    C_BLOCKS: tl.constexpr = (C + BLOCK_K - 1) // BLOCK_K
    STEPS: tl.constexpr = KH * KW * C_BLOCKS
    pid_m, pid_n = _tile_at(tile, M, N_COUNT, BLOCK_M, BLOCK_N, GROUP)
    pid_n += N_FROM // BLOCK_N
    acc = _tile_sum(x_ptr, w_ptr, pid_m, pid_n, M, 0, STEPS, C, H, W, C_OUT, OH, OW, KH, KW, 1, 1, PH, PW, 1, 1,
                    PRECISION, True, BLOCK_M, BLOCK_N, BLOCK_K)
    _store_tile(acc, b_ptr, y_ptr, pid_m, pid_n, M, C_OUT, OH * OW, HAS_BIAS, OUT_CL, BLOCK_M, BLOCK_N)


@triton.jit(do_not_specialize=["M"])
def _mixed_kernel(x_ptr, w_ptr, b_ptr, y_ptr, M,
                  C: tl.constexpr, H: tl.constexpr, W: tl.constexpr, C_OUT: tl.constexpr, OH: tl.constexpr,
                  OW: tl.constexpr, KH: tl.constexpr, KW: tl.constexpr, PH: tl.constexpr, PW: tl.constexpr,
                  HAS_BIAS: tl.constexpr, PRECISION: tl.constexpr, OUT_CL: tl.constexpr,
                  N_FROM: tl.constexpr, N_COUNT: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                  BLOCK_K: tl.constexpr, GROUP: tl.constexpr):
    """One program a tile of the channels N_FROM .. N_FROM + N_COUNT - 1 (one launch a region). One launch of two
    tile kinds (a branch a kind) did not fit: Triton 3.6 gave each branch's pipeline buffers shared memory of their
    own (393,280 bytes for two M128-N256-s4 loops)."""
    _region(x_ptr, w_ptr, b_ptr, y_ptr, M, tl.program_id(0), N_FROM, N_COUNT, C, H, W, C_OUT, OH, OW, KH, KW, PH, PW,
            HAS_BIAS, PRECISION, OUT_CL, BLOCK_M, BLOCK_N, BLOCK_K, GROUP)


@dataclasses.dataclass(frozen=True)
class Shape:
    """One launch of _mixed_kernel: the tile, its warps and stages, and the channels it covers."""
    bm: int
    bn: int
    warps: int
    stages: int
    n_from: int
    n_count: int

    def short(self) -> str:
        return f"M{self.bm}-N{self.bn}-w{self.warps}-s{self.stages} ch {self.n_from}+{self.n_count}"


def launcher(g, has_bias: bool, out_cl: bool, s: Shape, wp: torch.Tensor):
    m = g.n * g.oh * g.ow
    steps = g.kh * g.kw * triton.cdiv(g.c, 32)
    count = triton.cdiv(m, s.bm) * triton.cdiv(s.n_count, s.bn)
    desc = TensorDescriptor.from_tensor(wp.view(wp.shape[0], -1), [s.bn, 32])
    cx = dict(C=g.c, H=g.h, W=g.w, C_OUT=g.c_out, OH=g.oh, OW=g.ow, KH=g.kh, KW=g.kw, PH=g.padding[0],
              PW=g.padding[1], HAS_BIAS=has_bias, PRECISION=dot_precision("tf32"), OUT_CL=out_cl, N_FROM=s.n_from,
              N_COUNT=s.n_count, BLOCK_M=s.bm, BLOCK_N=s.bn, BLOCK_K=32, GROUP=GROUP_M, num_warps=s.warps,
              num_stages=safe_stages(s.stages, steps))

    def go(x, b, out):
        return _mixed_kernel[(count,)](x, desc, b, out, m, **cx)
    return go


def probe(name: str, layouts: list[str]) -> None:
    for layout in layouts:
        probe_layout(name, layout)


def probe_layout(name: str, layout: str) -> None:
    p0 = load_problem(name)
    dev = torch.device("cuda")
    p = dataclasses.replace(p0, layout=layout)
    x, w, b = make_inputs(p, 0, dev)
    fmt = torch.channels_last if layout == "channels_last" else torch.contiguous_format
    x = x.contiguous(memory_format=fmt)
    x_cl = x.contiguous(memory_format=torch.channels_last)
    x_nchw = x.contiguous()
    args = (p0.stride, p0.padding, p0.dilation)
    g = geometry(x, w, *args)
    out_cl = layout == "channels_last"
    torch.backends.cudnn.benchmark = True
    theirs, _ = torch_output(p0, x_nchw, w, b, "tf32")
    wp = packed_weight(w, True)
    x_r = to_channels_last(x_nchw, round_to_nearest_tf32=True)  # the kernels' input, rounded once (kernel-only rows)

    def route(x_in):  # the input as the kernels read it, made inside the call as the library does
        return rounded_tf32(x_in) if out_cl else to_channels_last(x_in, round_to_nearest_tf32=True)

    calls, info = {}, {}
    pin, _ = library_choice(pins.default_path(), torch.cuda.get_device_name(), p, "tf32")
    if isinstance(pin, pins.KernelPin):
        calls[f"library: {pin.short()}"] = get_variant(pin.kernel).prepared(
            x, w, b, *args, pin.meta, "tf32", out=torch.empty(p0.output_shape, device=dev, memory_format=fmt))
    pre = get_variant("nhwc_preround").prepared(x, w, b, *args, Meta(128, 128, 32, 4, 3), "tf32",
                                                out=torch.empty(p0.output_shape, device=dev, memory_format=fmt))
    calls["nhwc_preround M128-N128-K32-w4-s3"] = pre
    side = torch.cuda.Stream()
    bb = b if b is not None else x_r
    variants = {  # the first launch on the call's stream, the second on a stream of its own
        "M128-N256-w8-s4 | M128-N128-w4-s3": [Shape(128, 256, 8, 4, 0, 256), Shape(128, 128, 4, 3, 256, 128)],
        "M128-N256-w8-s3 | M128-N128-w4-s3": [Shape(128, 256, 8, 3, 0, 256), Shape(128, 128, 4, 3, 256, 128)],
        "M64-N256-w4-s3 | M128-N128-w4-s3": [Shape(64, 256, 4, 3, 0, 256), Shape(128, 128, 4, 3, 256, 128)],
        "M128-N256-w8-s4 | M64-N128-w4-s3": [Shape(128, 256, 8, 4, 0, 256), Shape(64, 128, 4, 3, 256, 128)],
        "M128-N128-w4-s3 | M128-N128-w4-s3 (the pin's tile, 2 launches)": [Shape(128, 128, 4, 3, 0, 256),
                                                                          Shape(128, 128, 4, 3, 256, 128)],
        "M128-N128-w4-s3 (the pin's tile, one launch)": [Shape(128, 128, 4, 3, 0, 384)],
    }
    for label, shapes in variants.items():
        gos = [launcher(g, b is not None, out_cl, s, wp) for s in shapes]
        out = torch.empty(p0.output_shape, device=dev, memory_format=fmt)

        def kernels(xr, gos=gos, out=out):
            if len(gos) == 1:
                gos[0](xr, bb, out)
                return out
            side.wait_stream(torch.cuda.current_stream())
            gos[0](xr, bb, out)
            with torch.cuda.stream(side):
                gos[1](xr, bb, out)
            torch.cuda.current_stream().wait_stream(side)
            return out

        def seq(xr, gos=gos, out=out):
            for go in gos:
                go(xr, bb, out)
            return out
        try:
            compiled = [go(x_r, bb, out) for go in gos]
            torch.cuda.synchronize()
        except Exception as e:  # noqa: BLE001 - a configuration that does not compile is a result
            print(f"  {label}: {type(e).__name__}: {str(e).splitlines()[0][:160]}", flush=True)
            continue
        info[label] = ", ".join(f"{c.n_regs} regs {c.n_spills} spills {c.metadata.shared} B smem "
                                f"{resident_programs(c)} an SM" for c in compiled)
        calls[f"kernel: {label}"] = lambda k=kernels: k(x_r)
        calls[f"route: {label}"] = lambda k=kernels: k(route(x))
        if len(gos) > 1:
            calls[f"kernel, one stream: {label}"] = lambda k=seq: k(x_r)
            calls[f"route, one stream: {label}"] = lambda k=seq: k(route(x))
    calls["cuDNN NCHW"] = lambda: torch_conv.conv2d(x_nchw, w, b, *args, "tf32")
    calls["cuDNN CL"] = lambda: torch_conv.conv2d(x_cl, w, b, *args, "tf32")
    med, ok, got = side_by_side(calls, theirs, dev)
    ref = got["nhwc_preround M128-N128-K32-w4-s3"]
    best = min(med["cuDNN NCHW"], med["cuDNN CL"]) if layout == "nchw" else med["cuDNN CL"]
    print(f"{name} {layout} (batch {p0.batch}); cuDNN's {'faster layout' if layout == 'nchw' else 'CL'} "
          f"{best:.4f} ms", flush=True)
    for k, v in info.items():
        print(f"  binaries of {k}: {v}", flush=True)
    for k, ms in med.items():
        same = bool(torch.equal(got[k], ref)) if got[k].shape == ref.shape else False
        print(f"  {k:62s} {ms:8.4f} ms  {best / ms:5.3f}x cuDNN  allclose {ok[k]}  bits = preround's {same}",
              flush=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--problems", default="alexnet_conv4,alexnet_conv3")
    ap.add_argument("--layouts", default="nchw,channels_last")
    a = ap.parse_args()
    print(torch.cuda.get_device_name(), torch.__version__, triton.__version__, flush=True)
    for name in a.problems.split(","):
        probe(name, a.layouts.split(","))


if __name__ == "__main__":
    main()
