"""GPU check of the split last wave (stream-K) of benchmarks/nhwc_split_probe.py (split_schedule), a probe of issue 13
session 23 (written as tests/gpu_scripts/nhwc_split.py while the split was in the library's nhwc_igemm): on random shapes, from
a few tiles (fewer than the GPU runs at once: up to MAX_PARTS workers a tile) to batches of several waves with a
part-empty last one, both nhwc kernels, both output layouts and tf32/ieee: the split launch (the GPU's own resident
programs) is within the precision's tolerance of float64, within 1e-5 of the same kernel unsplit (the same products
summed in another order), the same bits on a second and third (bound) launch, and leaves every arrival count at zero.
Prints the counts and 'ok'; any failure raises."""

import random
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
from probe_split import split_probe  # noqa: E402

nhwc_igemm = split_probe()

random.seed(23)
TOL = {"tf32": 5e-3, "ieee": 1e-5}
CASES = 60
bad, split_cases, parts_max = [], 0, 0
for i in range(CASES):
    big = i % 3 == 0  # several waves: the whole tiles and the last full wave's split
    n = random.randint(16, 96) if big else random.randint(1, 4)
    c = random.choice([16, 32, 64, 96, 128] if big else [16, 20, 32, 48, 64, 96])
    k = random.choice([64, 128, 192, 256, 384]) if big else random.randint(1, 200)
    kh = random.choice([1, 3, 5])
    h = random.randint(max(kh, 7), 16) if big else random.randint(kh, 30)
    w = random.randint(max(kh, 7), 16) if big else random.randint(kh, 30)
    x = torch.randn(n, c, h, w, device="cuda").contiguous(memory_format=torch.channels_last)
    wt = torch.randn(k, c, kh, kh, device="cuda") / (c * kh * kh) ** 0.5
    b = torch.randn(k, device="cuda") if i % 4 else None
    name = ("nhwc_igemm", "nhwc_preround")[i % 2]
    precision = random.choice(["tf32", "tf32", "ieee"])
    pre = name == "nhwc_preround"
    launch = nhwc_igemm.launch_preround if pre else nhwc_igemm.launch
    meta = (nhwc_igemm.default_meta_preround if pre else nhwc_igemm.default_meta)(k, 1, w, precision)
    fmt = random.choice([torch.contiguous_format, torch.channels_last])
    args = (1, kh // 2, 1, meta, precision)
    nhwc_igemm._bound.clear()  # this case's entries only: the unsplit and the split binding
    whole = launch(x, wt, b, *args, out=torch.empty(n, k, h, w, device="cuda", memory_format=fmt),
                     split_tail=False).out
    outs = [launch(x, wt, b, *args, out=torch.full((n, k, h, w), float("nan"), device="cuda").contiguous(
        memory_format=fmt)).out for _ in range(3)]
    torch.cuda.synchronize()
    key = [kk for kk in nhwc_igemm._bound if kk[2]]  # (binary, rows, split_tail, slots)
    sched = nhwc_igemm._bound[key[0]][3] if len(key) == 1 else None
    ref = F.conv2d(x.double(), wt.double(), None if b is None else b.double(), 1, kh // 2)
    rel = float((outs[0].double() - ref).norm() / ref.norm().clamp_min(1e-30))
    label = f"case {i}: {name} {precision} {meta.short()} n={n} c={c} k={k} r={kh} h={h} w={w} out {fmt} {sched}"
    if sched is None:
        bad.append(f"{label}: not one bound split launch but {len(key)}")
        continue
    if sched.sk_tiles:
        split_cases += 1
        parts_max = max(parts_max, -(-sched.workers // sched.sk_tiles) + 1)
    if torch.isnan(outs[0]).any():
        bad.append(f"{label}: outputs never written")
    if not (torch.equal(outs[0], outs[1]) and torch.equal(outs[0], outs[2])):
        bad.append(f"{label}: the launches differ from the first")
    if rel > TOL[precision]:
        bad.append(f"{label}: relative error {rel:.3g}")
    diff = float((outs[0] - whole).abs().max())
    if diff > 1e-5 * max(1.0, float(whole.abs().max())):
        bad.append(f"{label}: {diff:.3g} from the unsplit launch")
    if sched.sk_tiles == 0 and diff != 0:
        bad.append(f"{label}: nothing split, yet not the unsplit launch's bits")
    if any(int(cnt.abs().sum()) for _, cnt in nhwc_igemm._workspaces.values()):
        bad.append(f"{label}: an arrival count left nonzero")
    print(label, f"rel {rel:.2e}, {diff:.2e} from unsplit", flush=True)
for b_ in bad:
    print("FAIL", b_)
wrong_cases = len({b_.split(":")[0] for b_ in bad})  # a case may fail more than one check
print(f"{CASES - wrong_cases} of {CASES} cases right; {split_cases} ran a split tail (a tile's workers up to about "
      f"{parts_max})")
assert not bad
assert split_cases >= CASES // 3, "too few cases split their tail to check it"
print("ok")
