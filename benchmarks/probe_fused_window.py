"""Issue 13, session 21: fused_gluon with each gathered A operand feeding several output rows (the kernel and why:
benchmarks/probe_fused_window_kernel.py), on L1 #50: three rows (a sliding window down an image's rows) or two (pairs).

Session 17-19's profile of fused_gluon: latency-bound, issue slots 37-45 %, tensor pipe 44 %, about 300 SASS
instructions a tap a thread, most of them the gather; every folded input row is gathered three times (once for each
output row that reads it). The window gathers it once and issues 18 MMAs on it instead of 6.

Prediction (written before the first GPU call): the MMAs become what bounds the call. L1 #50's MMAs at 64-row tiles
with the window's 2 wasted steps a band (about 57 steps for 53 rows) are 77 GFLOP: 0.19-0.21 ms at the 368-414
TFLOP/s measured for TF32; with the write of the 297 MB output overlapped, the call 0.22-0.27 ms against the library's
0.323 (two warpgroups at 240 registers: three spill, as compiled for sm_90 here).

Checks, every variant: its L1 #50 output equal to the library's fused_gluon call bit for bit (each row's products in
fused_gluon's order), and KernelBench's allclose(1e-4) against torch's own output; then random problems of
fused_gluon's family (NCHW input: the probe kernel reads that only; both output layouts, bias or not, kernels 1-12 ×
1-12 with their weights folded to 3 rows) against the library's output bit for bit. Timing: the library's call and each
variant alternately, twice, median of 7 rounds of 20.

First run (three rows only; H200): every output right and fused_gluon's bit for bit, but 0.3131 ms against the
library's 0.3230 (-3 %), and one warpgroup an SM 0.341. Compiled here for sm_90a, every wgmma of the three-row kernel
waits for the one before it (ptxas 13.4: "wgmma.mma_async instructions are serialized due to insufficient register
resources for the wgmma pipeline"; the library kernel's do not). Hence the pairs: four accumulators instead of six.

    python benchmarks/probe_fused_window.py [--cases 40]
    python benchmarks/probe_fused_window.py --ablate       # where the three-row kernel's time goes
    python benchmarks/probe_fused_window.py --l1           # the three-row kernel with its next rows prefetched to L1
    python benchmarks/probe_fused_window.py --store        # ... with its output stored 32 columns of a channel a warp
    python benchmarks/probe_fused_window.py --library-store   # the same stores in the library's kernel as it is
    ncu ... python benchmarks/probe_fused_window.py --only 3,2,2     # one variant's calls only ("lib": the library's)
"""

from __future__ import annotations

import random
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "benchmarks"))

from convtune.kernels import Meta, fused_gluon
from convtune.kernels.common import geometry, writes_channels_last
from convtune.measure import bench
from convtune.measure.bench import TimingSettings

REGS = {1: 255, 2: 240, 3: 168}
# (output rows a gather, warpgroups, L2 prefetch: folded rows (3) or pairs (2) ahead, 0 none; ablation, 0 none)
VARIANTS = [(2, 2, 1, 0), (2, 2, 0, 0), (2, 2, 2, 0), (2, 1, 1, 0), (3, 2, 2, 0)]
# --ablate: the three-row kernel as it is, with a band's last row stored only, with one gather a band
ABLATIONS = [(3, 2, 2, 0, 0), (3, 2, 2, 1, 0), (3, 2, 2, 2, 0)]
# --l1: (rows, warpgroups, L2 prefetch, ablation, L1 prefetch: folded rows ahead)
L1_VARIANTS = [(3, 2, 2, 0, 0), (3, 2, 2, 0, 1), (3, 2, 0, 0, 1), (3, 2, 3, 0, 1), (3, 2, 2, 0, 2)]
# --store: (..., L1 prefetch, the NCHW output stored from a layout of 32 columns of a channel a warp)
STORE_VARIANTS = [(3, 2, 2, 0, 0, 0), (3, 2, 2, 0, 0, 1), (3, 2, 0, 0, 0, 1)]


def window_call(x, w, b, out, stride, pad, rows, nwg, ahead, ablate=0, l1_ahead=0, store_t=0):
    """The probe kernel's launch on an NCHW input, writing `out` (NCHW or channels_last)."""
    import probe_fused_window_kernel as pk

    from convtune.kernels import fused_gluon_kernel as lib

    out_cl = writes_channels_last(out)
    plan = fused_gluon.make_plan(geometry(x, w, stride, pad, 1), b is not None, Meta(64, 128, 16, 4, 2), "tf32",
                                 out_cl)
    taps = (pk.KHF_WINDOW, plan.taps[1])
    wp = fused_gluon.pack_weight(w, taps)
    w1, w2 = lib.descriptors(wp)
    cx = {**plan.constexprs, "NWG": nwg, "REGS": REGS[nwg], "KHF": taps[0], "AHEAD": ahead, "ROWS": rows,
          "ABLATE": ablate, "L1AHEAD": l1_ahead, "STORE_T": bool(store_t)}
    grid = (min(plan.n_rows, torch.cuda.get_device_properties(x.device).multi_processor_count),)
    bias = b if b is not None else out

    def call():
        return pk._conv2d_window_kernel[grid](x, w1, w2, bias, out, plan.n_rows, **cx, LLVM_OPT="O3", num_warps=4,
                                              maxnreg=REGS[nwg])
    return call


def mma_waits(compiled) -> str:
    """How many of the binary's wgmma instructions wait for all before them (`WARPGROUP.DEPBAR.LE gsb0, 0x0`): one
    after each means ptxas serialised them."""
    import subprocess
    import tempfile

    import triton
    try:
        tool = triton.knobs.nvidia.cuobjdump.path
        with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
            f.write(compiled.asm["cubin"])
            f.flush()
            sass = subprocess.run([tool, "-sass", f.name], capture_output=True, text=True, timeout=60,
                                  check=False).stdout
    except Exception as e:  # noqa: BLE001 - a report line, not a check
        return f"SASS not read ({type(e).__name__}: {e})"
    return f"HGMMA {sass.count('HGMMA')}, full waits {sass.count('DEPBAR.LE gsb0, 0x0')}"


def library_out(x, w, b, pad, fmt):
    out = torch.empty((x.shape[0], w.shape[0], (x.shape[2] + 2 * pad[0] - w.shape[2]) // 4 + 1,
                       (x.shape[3] + 2 * pad[1] - w.shape[3]) // 4 + 1), device=x.device, memory_format=fmt)
    return fused_gluon.prepared(x, w, b, 4, pad, 1, Meta(64, 128, 16, 4, 3), "tf32", out=out)().clone()


def random_cases(n_cases: int) -> list[str]:
    """fused_gluon's family drawn as tests/gpu_scripts/fused_gluon.py draws it, NCHW inputs; the window's output
    against the library's, bit for bit. Returns the failures."""
    random.seed(21)
    bad = []
    for i in range(n_cases):
        while True:
            kh, kw, ph, pw = random.randint(1, 12), random.randint(1, 12), random.randint(0, 3), random.randint(0, 3)
            h, w = random.randint(max(1, kh - 2 * ph), 240), random.randint(max(1, kw - 2 * pw), 4 * 63 + kw - 2 * pw)
            if (h + 2 * ph - kh) // 4 + 1 >= 1 and 1 <= (w + 2 * pw - kw) // 4 + 1 <= 64:
                break
        n, k = random.choice([1, 2, 3, 8]), random.choice([random.randint(1, 96), 96, 64, 65])
        x = torch.rand(n, 3, h, w, device="cuda")
        wt = (torch.rand(k, 3, kh, kw, device="cuda") * 2 - 1) / (3 * kh * kw) ** 0.5
        b = torch.rand(k, device="cuda") * 0.1 if i % 3 else None
        fmt = random.choice([torch.contiguous_format, torch.channels_last])
        ref = library_out(x, wt, b, (ph, pw), fmt)
        out = torch.full_like(ref, float("nan"))
        rows, nwg = random.choice([(2, 1), (2, 2), (2, 2), (3, 2)])
        window_call(x, wt, b, out, 4, (ph, pw), rows, nwg, 1)()
        label = f"case {i}: n={n} k={k} r={kh}x{kw} p={ph}x{pw} h={h} w={w} out {fmt} rows {rows} warpgroups {nwg}"
        if not torch.equal(out, ref):
            diff = (out - ref).abs().nan_to_num(float("inf")).max().item()
            bad.append(f"{label}: not the library's output (max |diff| {diff:.3g})")
    return bad


# --library-store: the library's kernel file with its NCHW stores from the layout of _store_row_t (32 columns of one
# channel a warp), the rest of it as it is: one output row a warpgroup, 2 or 3 warpgroups
_STORES = ('        gl.store(y_row + out_at, acc, mask=out_keep, eviction_policy="evict_first")\n'
           '        gl.store(y_row + out_at2, acc2, mask=out_keep2, eviction_policy="evict_first")\n')
_STORES_T = ("        if OUT_CL:\n" + "".join("    " + line + "\n" for line in _STORES.splitlines())
             + "        else:\n            _store_t(y_row, acc, acc2, OW, OHW, C_OUT)\n")
_STORE_T_FN = '''

@gluon.jit
def _store_t(y_row, acc, acc2, OW: gl.constexpr, OHW: gl.constexpr, C_OUT: gl.constexpr):
    st: gl.constexpr = gl.BlockedLayout([1, 1], [32, 1], [1, 4], [0, 1])
    a = gl.convert_layout(acc, st)
    a2 = gl.convert_layout(acc2, st)
    on = gl.arange(0, N1, layout=gl.SliceLayout(0, st))
    on2 = N1 + gl.arange(0, N2, layout=gl.SliceLayout(0, st))
    om = gl.expand_dims(gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, st)), 1)
    gl.store(y_row + gl.expand_dims(on, 0) * OHW + om, a, mask=(om < OW) & gl.expand_dims(on < C_OUT, 0),
             eviction_policy="evict_first")
    gl.store(y_row + gl.expand_dims(on2, 0) * OHW + om, a2, mask=(om < OW) & gl.expand_dims(on2 < C_OUT, 0),
             eviction_policy="evict_first")
'''


def library_store_t(tmp: Path):
    """The library's kernel module with its NCHW output stored as _store_row_t stores it."""
    from edited_module import edit, import_text

    text = (ROOT / "src" / "convtune" / "kernels" / "fused_gluon_kernel.py").read_text(encoding="utf-8")
    return import_text("library, stores by channel", edit(text, ((_STORES, _STORES_T),)) + _STORE_T_FN, tmp)


def main() -> None:
    dev = torch.device("cuda")
    print(torch.cuda.get_device_name(), flush=True)
    torch.backends.cudnn.allow_tf32 = True
    n_cases = int(sys.argv[sys.argv.index("--cases") + 1]) if "--cases" in sys.argv else 40
    gen = torch.Generator().manual_seed(1)
    x = torch.rand((256, 3, 224, 224), generator=gen).to(dev)
    conv = torch.nn.Conv2d(3, 96, 11, stride=4, padding=2)
    w, b = conv.weight.detach().to(dev), conv.bias.detach().to(dev)
    out = torch.empty((256, 96, 55, 55), device=dev)
    library = fused_gluon.prepared(x, w, b, 4, 2, 1, Meta(64, 128, 16, 4, 3), "tf32", out=out)
    ref = library().clone()
    theirs = F.conv2d(x, w, b, 4, 2)
    print(f"library: allclose(1e-4) to torch {bool(torch.allclose(ref, theirs, atol=1e-4, rtol=1e-4))}", flush=True)
    if "--only" in sys.argv:  # one call three times, for ncu: "lib" or "rows,warpgroups,ahead[,ablate]"
        spec = sys.argv[sys.argv.index("--only") + 1]
        call = library if spec == "lib" else window_call(x, w, b, out, 4, (2, 2), *map(int, spec.split(",")))
        for _ in range(3):
            call()
        torch.cuda.synchronize()
        return
    calls = {"library call (fused_gluon, 3 warpgroups)": library}
    print(f"library: {mma_waits(fused_gluon._bound[next(iter(fused_gluon._bound))][1])}", flush=True)
    if "--library-store" in sys.argv:
        import tempfile

        from convtune.kernels import fused_gluon_kernel as lib
        tmp = tempfile.mkdtemp()
        mod = library_store_t(Path(tmp))
        plan3 = fused_gluon.make_plan(geometry(x, w, 4, 2, 1), True, Meta(64, 128, 16, 4, 3), "tf32")
        wp = fused_gluon.pack_weight(w, plan3.taps)
        w1, w2 = lib.descriptors(wp)
        grid = (min(plan3.n_rows, torch.cuda.get_device_properties(dev).multi_processor_count),)
        for nwg in (3, 2):
            cx = {**plan3.constexprs, "NWG": nwg, "REGS": fused_gluon.REGISTERS[nwg]}
            mine = torch.full_like(out, float("nan"))

            def call(cx=cx, mine=mine):
                return mod._conv2d_fused_gluon_kernel[grid](x, w1, w2, b, mine, plan3.n_rows, **cx, LLVM_OPT="O3",
                                                            num_warps=4, maxnreg=cx["REGS"])
            compiled = call()
            fused_gluon.set_carveout(compiled, fused_gluon.CARVEOUT)
            torch.cuda.synchronize()
            name = f"library's kernel, stores by channel, {nwg} warpgroups"
            print(f"{name:45s} equal to the library's output: {bool(torch.equal(mine, ref))}, allclose(1e-4) to "
                  f"torch {bool(torch.allclose(mine, theirs, atol=1e-4, rtol=1e-4))}, regs {compiled.n_regs}, spills "
                  f"{compiled.n_spills}, {mma_waits(compiled)}", flush=True)
            calls[name] = call
    variants = (STORE_VARIANTS if "--store" in sys.argv or "--library-store" in sys.argv
                else [v + (0,) for v in (L1_VARIANTS if "--l1" in sys.argv else ABLATIONS if "--ablate" in sys.argv
                                         else [v + (0,) for v in VARIANTS])])
    for rows, nwg, ahead, ablate, l1_ahead, store_t in variants:
        name = (f"{rows} rows a gather, {nwg} warpgroups, prefetch {ahead}" + (f", ablation {ablate}" if ablate else "")
                + (f", L1 prefetch {l1_ahead}" if l1_ahead else "") + (", stores by channel" if store_t else ""))
        mine = torch.full_like(out, float("nan"))
        call = window_call(x, w, b, mine, 4, (2, 2), rows, nwg, ahead, ablate, l1_ahead, store_t)
        compiled = call()
        fused_gluon.set_carveout(compiled, fused_gluon.CARVEOUT)
        torch.cuda.synchronize()
        close = bool(torch.allclose(mine, theirs, atol=1e-4, rtol=1e-4))
        print(f"{name:45s} equal to the library's output: {bool(torch.equal(mine, ref))}, allclose(1e-4) to torch "
              f"{close}, regs {compiled.n_regs}, spills {compiled.n_spills}, {mma_waits(compiled)}", flush=True)
        calls[name] = call
    if not {"--ablate", "--l1", "--store", "--library-store"} & set(sys.argv):
        bad = random_cases(n_cases)
        for line in bad:
            print("FAIL", line)
        print(f"random family cases: {n_cases - len(bad)} of {n_cases} equal to the library's output bit for bit",
              flush=True)
    fast = TimingSettings(rounds=7, reps=20, warmup=3)
    for rep in range(2):
        for name, fn in calls.items():
            print(f"pass {rep + 1}: {name:45s} {bench.time_gpu(fn, fast, dev).median_ms:.4f} ms", flush=True)


if __name__ == "__main__":
    main()
