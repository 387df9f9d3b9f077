"""Issue 13, session 25: the three cases benchmarks/gpu_session24a.sh's split-tail check failed (branch issue13-tail) had
split outputs right against float64 and differed from the *unsplit* launch: this runs them, and 1x1 neighbours, on
main's nhwc_igemm alone, 4 launches each, at Triton's level and at O0. Run on the H200 before common.safe_stages
existed (as .probe/check_round_a.py; docs/evidence/h200_issue13_short_k.txt, call 3): with it, these loops compile one
stage shallower and the same cases are right (tests/gpu_scripts/nhwc_short_k.py)."""
import itertools, os
import torch, torch.nn.functional as F
from convtune.kernels import Meta, nhwc_igemm
print(torch.cuda.get_device_name(), flush=True)
CASES = [(70, 96, 128, 1, 7, 8, Meta(128, 256, 32, 8, 4), True), (128, 64, 192, 1, 16, 9, Meta(128, 256, 32, 8, 3), True),
         (148, 96, 192, 1, 11, 16, Meta(128, 256, 32, 8, 4), False)]
# a small grid around them
for c, k, meta in itertools.product([32, 64, 96], [128, 192, 256], [Meta(128, 256, 32, 8, 4), Meta(64, 256, 32, 4, 3)]):
    CASES.append((70, c, k, 1, 7, 8, meta, True))
CASES.append((70, 96, 128, 3, 7, 8, Meta(128, 256, 32, 8, 4), True))
bad = 0
for level in ("auto", "O0"):
    os.environ["CONVTUNE_LLVM_OPT"] = level
    for (n, c, k, r, h, w, meta, bias) in CASES:
        for fmt in (torch.channels_last, torch.contiguous_format):
            for pre in (False, True):
                if level == "O0" and (pre or fmt is torch.contiguous_format):
                    continue
                g = torch.Generator(device="cuda").manual_seed(n * 1000 + c + k)
                x = torch.randn(n, c, h, w, device="cuda", generator=g).contiguous(memory_format=torch.channels_last)
                wt = torch.randn(k, c, r, r, device="cuda", generator=g) / (c * r * r) ** 0.5
                b = torch.randn(k, device="cuda", generator=g) if bias else None
                ref = F.conv2d(x.double(), wt.double(), None if b is None else b.double(), 1, r // 2)
                fn = nhwc_igemm.launch_preround if pre else nhwc_igemm.launch
                rels = []
                for _ in range(4):
                    out = torch.full((n, k, h, w), float("nan"), device="cuda").contiguous(memory_format=fmt)
                    y = fn(x, wt, b, 1, r // 2, 1, meta, "tf32", out=out).out
                    torch.cuda.synchronize()
                    rels.append(float((y.double() - ref).norm() / ref.norm()))
                wrong = max(rels) > 5e-3
                bad += wrong
                if wrong or (c, k, r) in ((96, 128, 1), (64, 192, 1)):
                    print(f"{'WRONG' if wrong else 'ok   '} {level} n={n} c={c} k={k} r={r} h={h} w={w} {meta.short()} "
                          f"{'preround' if pre else 'igemm'} out {'CL' if fmt is torch.channels_last else 'NCHW'} "
                          f"bias {bias}: rel {', '.join(f'{v:.1e}' for v in rels)}", flush=True)
print(f"{bad} wrong", flush=True)
