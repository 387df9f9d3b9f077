"""Issue 13, session 25: where nhwc_igemm with A rounded in the kernel (tf32) went wrong on the H200: channels (K steps)
x taps x tile, 4 launches each against float64; and the TTGIR, LLVM IR and PTX of a wrong and a right binary under
$OUT. Run before common.safe_stages existed (as .probe/map_round_a.py; docs/evidence/h200_issue13_short_k.txt, call
4): wrong exactly where the K loop ran num_stages - 1 times with 256-wide N tiles. With safe_stages those loops compile
one stage shallower (tests/gpu_scripts/nhwc_short_k.py checks the same grid and both nhwc kernels)."""
import itertools, os
import torch, torch.nn.functional as F
from convtune.kernels import Meta, nhwc_igemm
OUT = os.environ.get("OUT", "out")
print(torch.cuda.get_device_name(), flush=True)
METAS = [Meta(128, 256, 32, 8, 4), Meta(128, 256, 32, 8, 3), Meta(128, 256, 32, 8, 2), Meta(128, 128, 32, 8, 3),
         Meta(64, 256, 32, 4, 3), Meta(128, 128, 32, 4, 3), Meta(64, 128, 32, 4, 3)]
rows = []
for c, r, meta in itertools.product([16, 32, 48, 64, 96, 128, 192, 384], [1, 3], METAS):
    n, h, w, k = 128, 12, 12, 256
    g = torch.Generator(device="cuda").manual_seed(c * 10 + r)
    x = torch.randn(n, c, h, w, device="cuda", generator=g).contiguous(memory_format=torch.channels_last)
    wt = torch.randn(k, c, r, r, device="cuda", generator=g) / (c * r * r) ** 0.5
    ref = F.conv2d(x.double(), wt.double(), None, 1, r // 2)
    rels = []
    for _ in range(4):
        out = torch.full((n, k, h, w), float("nan"), device="cuda").contiguous(memory_format=torch.channels_last)
        res = nhwc_igemm.launch(x, wt, None, 1, r // 2, 1, meta, "tf32", out=out)
        torch.cuda.synchronize()
        rels.append(float((res.out.double() - ref).norm() / ref.norm()))
    steps = r * r * -(-c // 32)
    wrong = sum(v > 5e-3 for v in rels)
    print(f"{'WRONG' if wrong else 'ok   '} c={c:3d} r={r} steps={steps:3d} {meta.short():22s} regs {res.n_regs} "
          f"smem {res.shared_bytes} {wrong}/4 wrong  max rel {max(rels):.1e}", flush=True)
    if (c, r) == (96, 1) and meta in (METAS[0], METAS[4]):
        tag = "wrong" if wrong else "right"
        for ir in ("ttgir", "llir", "ptx"):
            with open(f"{OUT}/c96_r1_{meta.short()}_{tag}.{ir}", "w") as f:
                f.write(res.compiled.asm[ir])
