"""Issue 13, session 14: why fold_igemm in the library (the tracker's runs: 0.495-0.52 ms on L1 #50) is slower than
the probe it came from (benchmarks/probe_fold_tma.py: fold + conv 0.415 ms at M128-N64+32-K32-w4-s4). Times, in
one process on L1 #50's inputs, the library's launch, its prepared call, its fold and its conv alone, next to the
probe's fold and conv, and each conv on the other's folded input; prints both binaries' registers, shared memory and
spills.

    python benchmarks/probe_fold_library.py
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
import torch.nn.functional as F
import triton

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "benchmarks"))

from probe_fold_rows import fold_input, fold_weight, pack_rows
from probe_fold_tma import conv_tma

from convtune.kernels import Meta
from convtune.kernels import fold_igemm as fi
from convtune.kernels.common import geometry
from convtune.measure import bench
from convtune.measure.bench import TimingSettings

dev = torch.device("cuda")
print(torch.cuda.get_device_name(), torch.__version__, triton.__version__, flush=True)
torch.backends.cudnn.allow_tf32 = True
fast = TimingSettings(rounds=5, reps=20, warmup=3)
gen = torch.Generator().manual_seed(1)
x = torch.rand((256, 3, 224, 224), generator=gen).to(dev)
conv = torch.nn.Conv2d(3, 96, 11, stride=4, padding=2)
w, b = conv.weight.detach().to(dev), conv.bias.detach().to(dev)
meta = Meta(128, 128, 32, 4, 4)
out = torch.empty((256, 96, 55, 55), device=dev)
plan = fi.make_plan(geometry(x, w, 4, 2, 1), True, meta, "tf32")
sms = torch.cuda.get_device_properties(dev).multi_processor_count


def t(label, fn):
    ms = bench.time_gpu(fn, fast, dev).median_ms
    print(f"{label:70s} {ms:.4f} ms", flush=True)
    return ms


theirs = F.conv2d(x, w, b, stride=4, padding=2)
got = fi.launch(x, w, b, 4, 2, 1, meta, "tf32", out=out).out
print("library allclose to torch:", bool(torch.allclose(got, theirs, atol=1e-4, rtol=1e-4)))
t("library fold_igemm.launch (checks, plan, fold, conv)", lambda: fi.launch(x, w, b, 4, 2, 1, meta, "tf32", out=out))
call = fi.prepared(x, w, b, 4, 2, 1, meta, "tf32", out=out)
t("library prepared call (fold, conv)", call)
t("library fold alone", lambda: fi.fold(x, plan))
xf = fi.fold(x, plan)
wp = fi.packed_weight(w, plan)
lib_bin = fi._launch(plan, xf, wp, b, out, "O3")
t("library conv alone (Triton dispatch)", lambda: fi._launch(plan, xf, wp, b, out, "O3"))
t("probe fold alone", lambda: fold_input(x, 4, 2, 57, 57, True))
xp = fold_input(x, 4, 2, 57, 57, True)
wrows = pack_rows(fold_weight(w, 4), 160)
cfg = (128, 64, 32, 32, 4, 4, True, 0, False)
t("probe conv alone (M128-N64+32-K32-w4-s4)", lambda: conv_tma(xp, wrows, b, out, 3, 3, *cfg, sms))
print("folded inputs equal:", bool(torch.equal(xf[:xp.numel()].view(xp.shape), xp)),
      "packed weights equal:", bool(torch.equal(wp, wrows)))
t("probe conv on the library's folded input", lambda: conv_tma(xf[:xp.numel()].view(xp.shape), wrows, b, out, 3, 3, *cfg, sms))
probe_bin = conv_tma(xp, wrows, b, out, 3, 3, *cfg, sms)
for name, k in (("library", lib_bin), ("probe", None)):
    if k is not None:
        print(name, "registers", k.n_regs, "spills", k.n_spills, "shared", k.metadata.shared, "stages", k.metadata.num_stages)
from probe_fold_tma import _tma_kernel
for key, k in list(_tma_kernel.device_caches[0][0].items())[:1]:
    print("probe registers", k.n_regs, "spills", k.n_spills, "shared", k.metadata.shared, "stages", k.metadata.num_stages)
