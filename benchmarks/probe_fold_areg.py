"""Issue 13, session 16: two cheap levers on fold_igemm's convolution (L1 #50: 0.32 ms of the call's 0.40), after
probe_fold_ws.py found Triton's automatic warp specialisation wrong on this kernel and device-side descriptors slow.

1. A through registers. The split column tile runs two wgmmas on each A tile (64 and 32 columns), each reading A
   from shared memory. A TF32 wgmma m64nNk8 does 64·N·8 MACs, 32 cycles at N = 64 and 16 at N = 32 on an SM's
   1024 TF32 MACs a cycle, while reading A (2 KB) and B (N·32 B) at 128 B a cycle takes 32 and 24 cycles: the
   N = 32 MMA waits on shared memory, 56 cycles a K step of 8 for 96 columns. With A in registers (one shared-memory
   read feeding both MMAs) a K step is 48 cycles of MMA against 40 of reading. An idempotent op on the loaded tile
   (round_tf32: the fold already rounded it) makes Triton take A from registers.
   Prediction: the convolution 0.32 → 0.28-0.30 ms if this is what holds the tensor pipe at 50 %; slower if the
   copy to registers is not hidden.
2. A persistent grid (1-3 programs per SM) with the library's host-side descriptors; probe_fold_ws.py's persistent
   2-per-SM grid ran 0.329 ms with device-side descriptors against 0.384 for its one-tile programs.
   Prediction: 0.31-0.33 ms, within ±3 % of the library.

Every variant's output is compared bit for bit with the library's call (both are the same sums in the same order).

    python benchmarks/probe_fold_areg.py            # the H200
    python benchmarks/probe_fold_areg.py --cpu-check  # two images through the interpreter: indexing only
"""

from __future__ import annotations

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

from probe_fold_ws import l1_50

from convtune.kernels import Meta
from convtune.kernels import fold_igemm as fi
from convtune.kernels.common import geometry
from convtune.kernels.precision import round_tf32


@triton.jit
def _tile(a_desc, w_desc, w2_desc, b_ptr, y_ptr, tile, HF: tl.constexpr, WF: tl.constexpr, OH: tl.constexpr,
          OW: tl.constexpr, C_OUT: tl.constexpr, KHF: tl.constexpr, ROW_PAD: tl.constexpr, AREG: tl.constexpr,
          BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """fold_igemm's convolution tile (the SPLIT case, NCHW output, bias), A optionally through registers."""
    N1: tl.constexpr = BLOCK_N // 2
    N2: tl.constexpr = BLOCK_N // 4
    NT: tl.constexpr = N1 + N2
    TILES_N: tl.constexpr = (C_OUT + NT - 1) // NT
    TILES_PER_IMG: tl.constexpr = (OH * WF + BLOCK_M - 1) // BLOCK_M
    CHUNKS: tl.constexpr = ROW_PAD // BLOCK_K
    OHW: tl.constexpr = OH * OW
    pid_n = tile % TILES_N
    t2 = tile // TILES_N
    img = t2 // TILES_PER_IMG
    q0 = (t2 % TILES_PER_IMG) * BLOCK_M
    r0 = img * (HF * WF) + q0
    n0 = pid_n * NT
    acc = tl.zeros((BLOCK_M, N1), dtype=tl.float32)
    acc2 = tl.zeros((BLOCK_M, N2), dtype=tl.float32)
    for t in range(KHF * CHUNKS):
        a = a_desc.load([r0 + (t // CHUNKS) * WF, (t % CHUNKS) * BLOCK_K])
        if AREG:
            a = round_tf32(a)  # idempotent on the fold's rounded values: A goes to registers, read once for both MMAs
        k = (t // CHUNKS) * ROW_PAD + (t % CHUNKS) * BLOCK_K
        acc = tl.dot(a, w_desc.load([n0, k]).T, acc, input_precision="tf32")
        acc2 = tl.dot(a, w2_desc.load([n0 + N1, k]).T, acc2, input_precision="tf32")
    q = q0 + tl.arange(0, BLOCK_M)
    p = (q // WF) * OW + q % WF
    valid = (q < OH * WF) & (q % WF < OW)
    y_img = y_ptr + img.to(tl.int64) * (C_OUT * OHW)
    fi._store(acc, b_ptr, y_img, p, valid, n0 + tl.arange(0, N1), C_OUT, OHW, True, False)  # the library's epilogue
    fi._store(acc2, b_ptr, y_img, p, valid, n0 + N1 + tl.arange(0, N2), C_OUT, OHW, True, False)


@triton.jit
def _conv(a_desc, w_desc, w2_desc, b_ptr, y_ptr, n_tiles, HF: tl.constexpr, WF: tl.constexpr, OH: tl.constexpr,
          OW: tl.constexpr, C_OUT: tl.constexpr, KHF: tl.constexpr, ROW_PAD: tl.constexpr, AREG: tl.constexpr,
          PROGS: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """PROGS 0: a program a tile (the library's grid); else PROGS programs loop over the tiles."""
    if PROGS == 0:
        _tile(a_desc, w_desc, w2_desc, b_ptr, y_ptr, tl.program_id(0), HF, WF, OH, OW, C_OUT, KHF, ROW_PAD, AREG,
              BLOCK_M, BLOCK_N, BLOCK_K)
    else:
        for tile in tl.range(tl.program_id(0), n_tiles, PROGS):
            _tile(a_desc, w_desc, w2_desc, b_ptr, y_ptr, tile, HF, WF, OH, OW, C_OUT, KHF, ROW_PAD, AREG,
                  BLOCK_M, BLOCK_N, BLOCK_K)


def main() -> None:
    cpu = "--cpu-check" in sys.argv
    dev, x, w, b = l1_50(cpu)
    out = torch.empty((x.shape[0], 96, 55, 55), device=dev)
    theirs = F.conv2d(x, w, b, stride=4, padding=2)
    n_sm = 132 if cpu else torch.cuda.get_device_properties(dev).multi_processor_count
    if not cpu:
        from convtune.measure import bench
        from convtune.measure.bench import TimingSettings
        fast = TimingSettings(rounds=7, reps=20, warmup=3)

        def t(label: str, fn) -> float:
            ms = bench.time_gpu(fn, fast, dev).median_ms
            print(f"{label:86s} {ms:.4f} ms", flush=True)
            return ms

    for bm, nw, ns in ((128, 4, 4), (128, 4, 3), (128, 8, 4), (256, 8, 3)):
        meta = Meta(bm, 128, 32, nw, ns)
        plan = fi.make_plan(geometry(x, w, 4, 2, 1), True, meta, "tf32")
        ref = fi.launch(x, w, b, 4, 2, 1, meta, "tf32", out=torch.empty_like(out)).out.clone()
        xf = fi.fold(x, plan)
        wp = fi.packed_weight(w, plan)
        descs = fi._descriptors(plan, xf, wp)
        n_tiles = plan.grid[0]
        cx = {k: plan.constexprs[k] for k in ("HF", "WF", "OH", "OW", "C_OUT", "KHF", "ROW_PAD", "BLOCK_M", "BLOCK_N",
                                              "BLOCK_K", "num_warps", "num_stages")}
        name = f"M{bm}-N64+32-K32-w{nw}-s{ns}"
        if not cpu:
            print(f"-- {name}: library allclose to torch {bool(torch.allclose(ref, theirs, atol=1e-4, rtol=1e-4))}")
            fi.run(plan, x, w, b, out)
            key = (plan.binary_key, dev.index or 0, b.data_ptr() & 15, out.data_ptr() & 15)
            conv_lib = fi._bound[(key, plan.grid)][0]
            t(f"library conv alone, {name}",
              lambda conv_lib=conv_lib, plan=plan, xf=xf, wp=wp: conv_lib(*fi._descriptors(plan, xf, wp), b, out))
        for areg in (False, True):
            for per_sm in (0, 1, 2, 3):
                if cpu and (per_sm not in (0, 2) or bm != 128 or nw != 4 or ns != 4):
                    continue
                progs = min(n_sm * per_sm, n_tiles)
                grid = (progs if per_sm else n_tiles,)
                label = f"{'A in registers' if areg else 'A from smem'}, {f'persistent x{per_sm}' if per_sm else 'a tile a program'}"
                try:
                    out.fill_(float("nan"))
                    k = _conv[grid](*descs, b, out, n_tiles, AREG=areg, PROGS=progs if per_sm else 0, **cx)
                    same = bool(torch.equal(out, ref))
                    if cpu:
                        print(f"{name} {label}: equal to the library {same}", flush=True)
                        continue
                    info = f"regs {k.n_regs}, spills {k.n_spills}, equal {same}"
                    t(f"  {label} [{info}]",
                      lambda grid=grid, areg=areg, progs=progs, per_sm=per_sm, descs=descs, n_tiles=n_tiles, cx=cx:
                      _conv[grid](*descs, b, out, n_tiles, AREG=areg, PROGS=progs if per_sm else 0, **cx))
                except Exception as e:  # noqa: BLE001 - a variant that does not compile is a result here
                    print(f"  {label}: {type(e).__name__}: {str(e)[:300]}", flush=True)


if __name__ == "__main__":
    main()
