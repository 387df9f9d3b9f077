"""Issue 13, session 16: can Triton's own warp specialisation (Meta's autoWS, which Triton 3.6 runs on Hopper for a
`tl.range(..., warp_specialize=True)` loop) take fold_igemm's convolution off its latency bound? And what do the
kernel rows' 16 floats of K padding cost?

NCU (session 15) had the convolution at 0.32 ms of L1 #50's 0.40: tensor pipe 50 %, 2 programs (8 warps) an SM,
no eligible warp in 72 % of cycles, the largest stall a wait on global memory. Every variant here runs the library's
K loop on the library's folded buffer through *device-side* TMA descriptors (tl.make_tensor_descriptor: autoWS
wants them on Hopper), timed side by side with the library's convolution (host descriptors, bound launch):

1. plain: the library's kernel with device descriptors (isolates that change).
2. ws-k: warp specialisation of the K loop (a producer warp issuing the TMA loads).
3. persistent: NUM_PROGS programs loop over the tiles, with and without warp specialisation of the tile loop; with
   it the producer runs ahead into the next tile's loads while the consumers store the last tile's output.
4. tail: each kernel row's 144 floats as 4 K steps of 32 and, after them, one of 16 (a second loop), instead of 5
   steps of 32 with the last half zero: 10 % less MMA work.

Predictions, written before the run:
- plain within ±3 % of the library's convolution.
- ws-k: if autoWS takes the loop, 0-10 % faster; it may not specialise (session 13: nhwc_igemm's masked-load loop
  compiled without a ttg.warp_specialize op) or may fail to compile.
- persistent + WS: the epilogue (a 128×96 tile's 48 KB written while nothing else runs on those warps) hidden,
  0.32 → 0.26-0.29 ms; persistent without WS slower than the library (session 14: 0.41-0.97 ms).
- tail: 3-7 % faster than the same kernel without it (the second loop's pipeline fill eats part of the 10 %).

    python benchmarks/probe_fold_ws.py            # the H200
    python benchmarks/probe_fold_ws.py --cpu-check  # two images through the interpreter: indexing only
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

if "--cpu-check" in sys.argv:
    os.environ["TRITON_INTERPRET"] = "1"

import torch
import torch.nn.functional as F
import triton
import triton.language as tl

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "benchmarks"))

from probe_fold_rows import l1_50_setup

from convtune.kernels import Meta
from convtune.kernels import fold_igemm as fi
from convtune.kernels.common import geometry
from convtune.kernels.precision import round_to_tf32


@triton.jit
def _tile(a_desc, w_desc, w2_desc, at_desc, wt_desc, wt2_desc, b_ptr, y_ptr, tile,
          HF: tl.constexpr, WF: tl.constexpr, OH: tl.constexpr, OW: tl.constexpr, C_OUT: tl.constexpr,
          KHF: tl.constexpr, ROW: tl.constexpr, TAIL: tl.constexpr, WS_K: tl.constexpr,
          BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """One output tile of fold_igemm's convolution (its SPLIT case: BLOCK_N/2 + BLOCK_N/4 columns), NCHW output."""
    N1: tl.constexpr = BLOCK_N // 2
    N2: tl.constexpr = BLOCK_N // 4
    NT: tl.constexpr = N1 + N2
    TILES_N: tl.constexpr = (C_OUT + NT - 1) // NT
    TILES_PER_IMG: tl.constexpr = (OH * WF + BLOCK_M - 1) // BLOCK_M
    MAIN: tl.constexpr = ROW // BLOCK_K  # K steps of BLOCK_K a kernel row; TAIL: then one of BLOCK_K // 2
    OHW: tl.constexpr = OH * OW
    pid_n = tile % TILES_N
    t2 = tile // TILES_N
    img = t2 // TILES_PER_IMG
    q0 = (t2 % TILES_PER_IMG) * BLOCK_M
    r0 = img * (HF * WF) + q0
    n0 = pid_n * NT
    acc = tl.zeros((BLOCK_M, N1), dtype=tl.float32)
    acc2 = tl.zeros((BLOCK_M, N2), dtype=tl.float32)
    for t in tl.range(0, KHF * MAIN, warp_specialize=WS_K):
        a = a_desc.load([r0 + (t // MAIN) * WF, (t % MAIN) * BLOCK_K])
        k = (t // MAIN) * ROW + (t % MAIN) * BLOCK_K
        acc = tl.dot(a, w_desc.load([n0, k]).T, acc, input_precision="tf32")
        acc2 = tl.dot(a, w2_desc.load([n0 + N1, k]).T, acc2, input_precision="tf32")
    if TAIL:
        for kh in range(KHF):
            a = at_desc.load([r0 + kh * WF, MAIN * BLOCK_K])
            k = kh * ROW + MAIN * BLOCK_K
            acc = tl.dot(a, wt_desc.load([n0, k]).T, acc, input_precision="tf32")
            acc2 = tl.dot(a, wt2_desc.load([n0 + N1, k]).T, acc2, input_precision="tf32")
    q = q0 + tl.arange(0, BLOCK_M)
    p = (q // WF) * OW + q % WF
    valid = (q < OH * WF) & (q % WF < OW)
    y_img = y_ptr + img.to(tl.int64) * (C_OUT * OHW)
    fi._store(acc, b_ptr, y_img, p, valid, n0 + tl.arange(0, N1), C_OUT, OHW, True, False)  # the library's epilogue
    fi._store(acc2, b_ptr, y_img, p, valid, n0 + N1 + tl.arange(0, N2), C_OUT, OHW, True, False)


@triton.jit
def _descs(xf_ptr, w_ptr, rows, KWF_CF: tl.constexpr, CF: tl.constexpr, C_OUT: tl.constexpr, K_ALL: tl.constexpr,
           BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    a = tl.make_tensor_descriptor(xf_ptr, shape=[rows, KWF_CF], strides=[CF, 1], block_shape=[BLOCK_M, BLOCK_K])
    w = tl.make_tensor_descriptor(w_ptr, shape=[C_OUT, K_ALL], strides=[K_ALL, 1], block_shape=[BLOCK_N // 2, BLOCK_K])
    w2 = tl.make_tensor_descriptor(w_ptr, shape=[C_OUT, K_ALL], strides=[K_ALL, 1], block_shape=[BLOCK_N // 4, BLOCK_K])
    at = tl.make_tensor_descriptor(xf_ptr, shape=[rows, KWF_CF], strides=[CF, 1],
                                   block_shape=[BLOCK_M, BLOCK_K // 2])
    wt = tl.make_tensor_descriptor(w_ptr, shape=[C_OUT, K_ALL], strides=[K_ALL, 1],
                                   block_shape=[BLOCK_N // 2, BLOCK_K // 2])
    wt2 = tl.make_tensor_descriptor(w_ptr, shape=[C_OUT, K_ALL], strides=[K_ALL, 1],
                                    block_shape=[BLOCK_N // 4, BLOCK_K // 2])
    return a, w, w2, at, wt, wt2


@triton.jit
def _conv_plain(xf_ptr, w_ptr, b_ptr, y_ptr, rows,
                HF: tl.constexpr, WF: tl.constexpr, OH: tl.constexpr, OW: tl.constexpr, C_OUT: tl.constexpr,
                KHF: tl.constexpr, KWF_CF: tl.constexpr, CF: tl.constexpr, ROW: tl.constexpr, TAIL: tl.constexpr,
                WS_K: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    a, w, w2, at, wt, wt2 = _descs(xf_ptr, w_ptr, rows, KWF_CF, CF, C_OUT, KHF * ROW, BLOCK_M, BLOCK_N, BLOCK_K)
    _tile(a, w, w2, at, wt, wt2, b_ptr, y_ptr, tl.program_id(0), HF, WF, OH, OW, C_OUT, KHF, ROW, TAIL, WS_K,
          BLOCK_M, BLOCK_N, BLOCK_K)


@triton.jit
def _conv_persistent(xf_ptr, w_ptr, b_ptr, y_ptr, rows, n_tiles,
                     HF: tl.constexpr, WF: tl.constexpr, OH: tl.constexpr, OW: tl.constexpr, C_OUT: tl.constexpr,
                     KHF: tl.constexpr, KWF_CF: tl.constexpr, CF: tl.constexpr, ROW: tl.constexpr,
                     TAIL: tl.constexpr, WS: tl.constexpr, NUM_PROGS: tl.constexpr,
                     BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    a, w, w2, at, wt, wt2 = _descs(xf_ptr, w_ptr, rows, KWF_CF, CF, C_OUT, KHF * ROW, BLOCK_M, BLOCK_N, BLOCK_K)
    for tile in tl.range(tl.program_id(0), n_tiles, NUM_PROGS, warp_specialize=WS, flatten=False):
        _tile(a, w, w2, at, wt, wt2, b_ptr, y_ptr, tile, HF, WF, OH, OW, C_OUT, KHF, ROW, TAIL, False,
              BLOCK_M, BLOCK_N, BLOCK_K)


def l1_50(cpu: bool):
    """L1 #50's inputs (probe_fold_rows.l1_50_setup: torch.rand, seed 1; two images on the CPU): device, x, w, b."""
    dev, _, x, w, b, *_ = l1_50_setup(cpu, 256)
    return dev, x, w, b


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cpu-check", action="store_true")
    cpu = ap.parse_args().cpu_check
    dev, x, w, b = l1_50(cpu)
    triton.set_allocator(lambda size, align, stream: torch.empty(size, dtype=torch.int8, device=dev))
    meta = Meta(128, 128, 32, 4, 4)
    plan = fi.make_plan(geometry(x, w, 4, 2, 1), True, meta, "tf32")
    n, hf, wf, cf = plan.folded_shape
    khf, kwf = plan.taps
    out = torch.empty((x.shape[0], 96, 55, 55), device=dev)
    ref = fi.launch(x, w, b, 4, 2, 1, meta, "tf32", out=torch.empty_like(out)).out.clone()
    theirs = F.conv2d(x, w, b, stride=4, padding=2)
    print("library allclose to torch:", bool(torch.allclose(ref, theirs, atol=1e-4, rtol=1e-4)), flush=True)
    xf = fi.fold(x, plan)
    packs = {tail: round_to_tf32(fi.fold_weight(w, plan.stride, plan.taps, cf, kwf * cf if tail else plan.row_pad))
             for tail in (False, True)}
    n_sm = 132 if cpu else torch.cuda.get_device_properties(dev).multi_processor_count

    if not cpu:
        from convtune.measure import bench
        from convtune.measure.bench import TimingSettings
        fast = TimingSettings(rounds=7, reps=20, warmup=3)
        wp = fi.packed_weight(w, plan)

        def t(label: str, fn) -> float:
            ms = bench.time_gpu(fn, fast, dev).median_ms
            print(f"{label:78s} {ms:.4f} ms", flush=True)
            return ms

        t("library prepared call (fold + conv), M128-N64+32-K32-w4-s4", fi.prepared(x, w, b, 4, 2, 1, meta, "tf32", out=out))
        t("library fold alone", lambda: fi.fold(x, plan))
        fi.run(plan, x, w, b, out)
        key = (plan.binary_key, dev.index or 0, b.data_ptr() & 15, out.data_ptr() & 15)
        conv_lib = fi._bound[(key, plan.grid)][0]
        t("library conv alone (host descriptors, bound launch)", lambda: conv_lib(*fi._descriptors(plan, xf, wp), b, out))

    variants = [  # (name, persistent programs per SM or 0, WS, TAIL, BLOCK_M, num_warps, num_stages)
        ("plain", 0, False, False, 128, 4, 4),
        ("plain tail", 0, False, True, 128, 4, 4),
        ("ws-k", 0, True, False, 128, 4, 4),
        ("persistent x1", 1, False, False, 128, 4, 4),
        ("persistent x2", 2, False, False, 128, 4, 4),
        ("persistent x1 ws", 1, True, False, 128, 4, 4),
        ("persistent x1 ws s3", 1, True, False, 128, 4, 3),
        ("persistent x2 ws s3", 2, True, False, 128, 4, 3),
        ("persistent x1 ws w8", 1, True, False, 128, 8, 4),
        ("persistent x1 ws M256 w8 s3", 1, True, False, 256, 8, 3),
        ("persistent x1 ws tail", 1, True, True, 128, 4, 4),
        ("persistent x1 ws tail w8", 1, True, True, 128, 8, 4),
    ]
    if cpu:
        variants = [v for v in variants if v[0] in ("plain", "plain tail", "persistent x1 ws tail")]
    for name, per_sm, ws, tail, bm, nw, ns in variants:
        row = kwf * cf if tail else plan.row_pad
        cx = {"HF": hf, "WF": wf, "OH": plan.constexprs["OH"], "OW": plan.constexprs["OW"], "C_OUT": 96, "KHF": khf,
              "KWF_CF": kwf * cf, "CF": cf, "ROW": row, "TAIL": tail, "BLOCK_M": bm, "BLOCK_N": 128, "BLOCK_K": 32,
              "num_warps": nw, "num_stages": ns}
        n_tiles = n * triton.cdiv(plan.constexprs["OH"] * wf, bm)
        if per_sm:
            progs = min(n_sm * per_sm, n_tiles)
            launch = lambda cx=cx, progs=progs, n_tiles=n_tiles, ws=ws: _conv_persistent[(progs,)](
                xf, packs[cx["TAIL"]], b, out, plan.rows, n_tiles, WS=ws, NUM_PROGS=progs, **cx)
        else:
            launch = lambda cx=cx, n_tiles=n_tiles, ws=ws: _conv_plain[(n_tiles,)](
                xf, packs[cx["TAIL"]], b, out, plan.rows, WS_K=ws, **cx)
        try:
            out.fill_(float("nan"))
            k = launch()
            same = bool(torch.equal(out, ref))
            close = bool(torch.allclose(out, ref, atol=1e-5, rtol=1e-5))
            judge = bool(torch.allclose(out, theirs, atol=1e-4, rtol=1e-4))
            if cpu:
                print(f"{name:30s} equal to the library: {same}, allclose 1e-5: {close}, judge: {judge}", flush=True)
                continue
            ttgir = k.asm.get("ttgir", "")
            info = (f"ws op: {'ttg.warp_specialize' in ttgir}, regs {k.n_regs}, spills {k.n_spills}, "
                    f"smem {k.metadata.shared // 1024} KB, equal {same}, 1e-5 {close}, judge {judge}")
            t(f"{name} M{bm}-w{nw}-s{ns} [{info}]", launch)
        except Exception as e:  # noqa: BLE001 - a variant that does not compile is a result here
            print(f"{name}: {type(e).__name__}: {str(e)[:300]}", flush=True)


if __name__ == "__main__":
    main()
