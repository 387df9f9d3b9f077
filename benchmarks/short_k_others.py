"""Issue 13, session 25: do the other kernels that round A in the kernel (nchw_1x1, nchw_igemm) and implicit_gemm have
nhwc_igemm's fault on K loops of num_stages - 1 steps (common.safe_stages)? 16 to 128 channels at tiles of 3 and 4
stages, 4 launches a case against float64 and against each other. On the H200: 0 of 105 wrong
(docs/evidence/h200_issue13_short_k.txt, call 5)."""
import itertools
import torch, torch.nn.functional as F
from convtune.kernels import Meta, nchw_1x1, nchw_igemm, implicit_gemm
METAS = [Meta(128, 256, 32, 8, 3), Meta(128, 256, 32, 8, 4), Meta(64, 256, 32, 4, 3), Meta(64, 256, 32, 4, 4),
         Meta(128, 128, 32, 8, 3), Meta(64, 128, 32, 4, 3), Meta(64, 64, 32, 4, 3)]
bad = total = 0
for (name, mod, r), c, meta in itertools.product([("nchw_1x1", nchw_1x1, 1), ("nchw_igemm", nchw_igemm, 3),
                                                  ("implicit_gemm", implicit_gemm, 1)],
                                                 [16, 32, 48, 64, 80, 96, 128], METAS):
    n, h, w, k = 64, 12, 12, 256
    g = torch.Generator(device="cuda").manual_seed(c)
    x = torch.randn(n, c, h, w, device="cuda", generator=g)
    wt = torch.randn(k, c, r, r, device="cuda", generator=g) / (c * r * r) ** 0.5
    ref = F.conv2d(x.double(), wt.double(), None, 1, r // 2)
    try:
        outs = [mod.launch(x, wt, None, 1, r // 2, 1, meta, "tf32").out for _ in range(4)]
        torch.cuda.synchronize()
    except Exception as e:
        print(f"--    {name} c={c} {meta.short()}: {type(e).__name__}: {str(e)[:90]}", flush=True)
        continue
    rels = [float((y.double() - ref).norm() / ref.norm()) for y in outs]
    same = all(torch.equal(outs[0], y) for y in outs[1:])
    wrong = max(rels) > 5e-3 or not same
    bad += wrong
    total += 1
    if wrong or meta in METAS[:2]:
        print(f"{'WRONG' if wrong else 'ok   '} {name} c={c} r={r} {meta.short()} max rel {max(rels):.1e} "
              f"{'same' if same else 'differ'}", flush=True)
print(f"{bad} of {total} wrong", flush=True)
