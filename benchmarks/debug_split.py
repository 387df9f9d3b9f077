"""Issue 13, session 23 (debugging, not evidence of speed): nhwc_igemm's split last wave gave wrong, launch-to-launch
different outputs in one case of tests/gpu_scripts/nhwc_split.py on the H200 (M64-N256-K32-w4-s3, 68 tiles shared by
264 workers), right in 49 others and in the interpreter. This runs that case and others on copies of the kernel module
with one change each, and counts the wrong elements per launch against the unsplit launch:

  as is       benchmarks/nhwc_split_probe.py: a CTA barrier right after the arrival count's atomic
  no barrier  without it (the first version): the count, added by one thread, reaches the others through shared
              memory (PTX: atom; st.shared; bar.sync; ld.shared), and nothing kept a warp ahead from overwriting that
              word before a warp behind had read it

Cases: case 42, then case 42 with one thing changed (the weight tiles by tl.load instead of TMA, the input rounded
before the kernel so that A comes from shared memory, other tiles), and alexnet_conv5 at case 42's tile.

What the runs showed (docs/evidence/h200_issue13_split.txt): the sums go wrong only at M64-N256-w4-s3 with the weight
through TMA and A rounded in the kernel (case 42 in 11 of 12 launches with the barrier, 10 of 12 without; alexnet_conv5
at that tile in 12 of 12, 114,048-243,550 elements); right in 12 of 12 with the weight by tl.load, with the input
rounded first, at M64-N128 and at M128-N256-w8. Earlier states of this script (the split then in the library's
module), without the barrier: in the first, case 42 wrong with every change tried (the fix-up loop unpipelined, the
parts loaded volatile, CTA barriers around each part) but the K loop unpipelined (right in 5 of 5 launches); in the
second (a part under a threshold of K steps ran its loop unpipelined, tl.range(num_stages=...) spelt out), right in 5
of 5 at thresholds 0 (none), num_stages and 4 x num_stages, and wrong in 3 of 5 at 2 x num_stages: the error came and
went. The split's parts re-enter the pipelined K loop (with its
TMA barriers) within one program, which the unsplit kernel never does.

    python benchmarks/debug_split.py
"""
import importlib.util
import sys
import tempfile
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
from convtune.kernels import Meta  # noqa: E402

SRC = (ROOT / "benchmarks/nhwc_split_probe.py").read_text()
BARRIER = """                tl.debug_barrier()
                if arrived =="""
EDITS = {
    "as is": [],
    "no barrier": [(BARRIER, "                if arrived ==")],  # the count's broadcast read unguarded (first version)
}
LAUNCHES = 12
tmp = Path(tempfile.mkdtemp())


def module(label: str, edits):
    src = SRC
    for a, b in edits:
        assert a in src, (label, a)
        src = src.replace(a, b)
    name = "dbg_" + label.replace(" ", "_")
    path = tmp / f"{name}.py"
    path.write_text(src)
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


CASE42 = (36, 128, 256, 3, 10, 12, Meta(64, 256, 32, 4, 3), True, True, None)
CASES = {  # label: (n, c, k, r, h, w, meta, bias, out channels_last, slots: None for the GPU's), launch options
    "gpu script case 42": (CASE42, {}),
    "42, weight by tl.load": (CASE42, {"weight_tma": False}),
    "42, input rounded first": (CASE42, {"round_input_first": True}),
    "42, M64-N128": ((36, 128, 256, 3, 10, 12, Meta(64, 128, 32, 4, 3), True, True, None), {}),
    "42, M128-N256-w8-s4": ((36, 128, 256, 3, 10, 12, Meta(128, 256, 32, 8, 4), True, True, None), {}),
    "conv5 shape, M64-N256": ((256, 384, 256, 3, 13, 13, Meta(64, 256, 32, 4, 3), True, True, None), {}),
}
print(torch.cuda.get_device_name(), torch.__version__, flush=True)
mods = {label: module(label, edits) for label, edits in EDITS.items()}
for case, ((n, c, k, r, h, w, meta, bias, out_cl, slots), opts) in CASES.items():
    g = torch.Generator(device="cuda").manual_seed(42)
    x = torch.randn(n, c, h, w, device="cuda", generator=g).contiguous(memory_format=torch.channels_last)
    wt = torch.randn(k, c, r, r, device="cuda", generator=g) / (c * r * r) ** 0.5
    b = torch.randn(k, device="cuda", generator=g) if bias else None
    fmt = torch.channels_last if out_cl else torch.contiguous_format
    for label, mod in mods.items():
        whole = mod.launch(x, wt, b, 1, r // 2, 1, meta, "tf32", split_tail=False, **opts).out
        plan = mod.make_plan(mod.geometry(x, wt, 1, r // 2, 1), bias, meta, "tf32")
        wrong = []
        for _ in range(LAUNCHES):
            y = mod.launch(x, wt, b, 1, r // 2, 1, meta, "tf32", out=torch.full_like(whole, float("nan")).contiguous(
                memory_format=fmt), slots=slots, **opts).out
            torch.cuda.synchronize()
            d = (y - whole).abs().permute(0, 2, 3, 1).reshape(-1, k)  # rows × channels
            bad = d > 1e-3 * max(1.0, float(whole.abs().max()))
            rows = bad.any(1).nonzero().flatten()
            wrong.append((int(bad.sum()), sorted({int(r_) // meta.BLOCK_M for r_ in rows.tolist()})[:8],
                          int(torch.isnan(y).sum())))
        entry = [v for kk, v in mod._bound.items() if kk[2]]
        sched = entry[0][3] if entry else None
        print(f"{case:22s} {label:12s} {sched}  wrong elements per launch {[e[0] for e in wrong]}, nan "
              f"{[e[2] for e in wrong]}, first wrong row tiles {wrong[0][1]}", flush=True)
        mod._bound.clear()
