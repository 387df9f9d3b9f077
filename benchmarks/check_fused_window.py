"""Issue 13, session 22: the library's fused_gluon after the window moved into it (kernels/fused_gluon_kernel._window),
on L1 #50 on a Hopper GPU: what its binaries are and what its calls take, next to the kernels it replaced.

For 1 and 2 MMA warpgroups and both output layouts: the SASS of the library's own binary (HGMMA count and how many of
them wait for every MMA before them: one wait after each would mean ptxas serialised the MMAs, as triton 3.9's ptxas
does locally for want of registers, "insufficient register resources for the wgmma pipeline"), its registers and
spills, its output against fold_igemm's bit for bit and KernelBench's allclose(1e-4) against torch's own output. Then
the library's fused_gluon calls (NCHW output) at 1 and 2 warpgroups, fold_igemm at its default and cuDNN in both
layouts, timed alternately, twice, median of 7 rounds of 20 (the tracker's sweep and promote give the recorded
numbers; this puts them side by side in one process).

Prediction (before the run): 2 warpgroups 0.285-0.292 ms, as the session 21 probe measured (0.2869-0.2891 ms against
0.3212-0.3260 for the one-row kernel); 1 warpgroup about 10 % slower (0.341 against 0.313 in the probe without the
stores by channel); 2 full waits for 72 HGMMA at 2 warpgroups as in the probe's binary.

    python benchmarks/check_fused_window.py
    ncu ... python benchmarks/check_fused_window.py --ncu    # the library's call (2 warpgroups, NCHW) 3 times, only
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from convtune.kernels import Meta, fused_gluon, get_variant
from convtune.measure import bench
from convtune.measure.bench import TimingSettings


def mma_waits(compiled) -> str:
    """The binary's HGMMA instructions and its full waits on them (`WARPGROUP.DEPBAR.LE gsb0, 0x0`)."""
    import triton
    try:
        with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
            f.write(compiled.asm["cubin"])
            f.flush()
            sass = subprocess.run([triton.knobs.nvidia.cuobjdump.path, "-sass", f.name], capture_output=True,
                                  text=True, timeout=60, check=False).stdout
    except Exception as e:  # noqa: BLE001 - a report line, not a check
        return f"SASS not read ({type(e).__name__}: {e})"
    return f"HGMMA {sass.count('HGMMA')}, full waits {sass.count('DEPBAR.LE gsb0, 0x0')}"


def main() -> None:
    dev = torch.device("cuda")
    print(torch.cuda.get_device_name(), flush=True)
    torch.backends.cudnn.allow_tf32 = True  # the judge's reference: torch's defaults
    gen = torch.Generator().manual_seed(1)
    x = torch.rand((256, 3, 224, 224), generator=gen).to(dev)
    conv = torch.nn.Conv2d(3, 96, 11, stride=4, padding=2)
    w, b = conv.weight.detach().to(dev), conv.bias.detach().to(dev)
    if "--ncu" in sys.argv:
        call = fused_gluon.prepared(x, w, b, 4, 2, 1, Meta(64, 128, 16, 4, 2), "tf32")
        for _ in range(3):
            call()
        torch.cuda.synchronize()
        return
    theirs = F.conv2d(x, w, b, 4, 2)
    fold = get_variant("fold_igemm")
    fold_meta = fold.default_meta(96, 4, 224, "tf32")
    fold_out = fold.launch(x, w, b, 4, 2, 1, fold_meta, "tf32").out
    calls = {}
    for nwg in (1, 2):
        for fmt in (torch.contiguous_format, torch.channels_last):
            out = torch.full(theirs.shape, float("nan"), device=dev).contiguous(memory_format=fmt)
            fused_gluon._bound.clear()
            call = fused_gluon.prepared(x, w, b, 4, 2, 1, Meta(64, 128, 16, 4, nwg), "tf32", out=out)
            call()
            torch.cuda.synchronize()
            bound = next(iter(fused_gluon._bound.values()), None)
            if bound is None:
                raise SystemExit("the library's launch was not bound: no binary to read")
            compiled = bound[1]
            layout = "NCHW" if fmt == torch.contiguous_format else "channels_last"
            print(f"library fused_gluon, {nwg} warpgroups, {layout} output: equal to fold_igemm's "
                  f"{bool(torch.equal(out, fold_out))}, allclose(1e-4) to torch "
                  f"{bool(torch.allclose(out, theirs, atol=1e-4, rtol=1e-4))}, regs {compiled.n_regs}, spills "
                  f"{compiled.n_spills}, {mma_waits(compiled)}", flush=True)
            if fmt == torch.contiguous_format:
                calls[f"library fused_gluon, {nwg} warpgroups"] = call
    calls[f"fold_igemm {fold_meta.short()}"] = lambda: fold.launch(x, w, b, 4, 2, 1, fold_meta, "tf32")
    calls["cuDNN, NCHW"] = lambda: F.conv2d(x, w, b, 4, 2)
    x_cl = x.contiguous(memory_format=torch.channels_last)
    w_cl = w.contiguous(memory_format=torch.channels_last)
    calls["cuDNN, channels_last"] = lambda: F.conv2d(x_cl, w_cl, b, 4, 2)
    fast = TimingSettings(rounds=7, reps=20, warmup=3)
    for rep in range(2):
        for name, fn in calls.items():
            print(f"pass {rep + 1}: {name:40s} {bench.time_gpu(fn, fast, dev).median_ms:.4f} ms", flush=True)


if __name__ == "__main__":
    main()
