"""Issue 13, session 22: KernelBench's per-call timing of an exported L1 #50 file against its GPU time. KernelBench
(timing.time_execution_with_cuda_event) times each call alone: it synchronises, launches a 256 MB fill to clear L2,
records the start event, calls the model and records the end, so that host time of the call beyond the fill's shows in
its runtime. This prints the host time of one forward of the export's ModelNew and of the library's bound call, the
fill's time, and KernelBench's own timing function on the export, the library's call and the reference Model.

Session 22's first export of the window (Triton's dispatch on every call) was judged 0.39 ms (mean of 100; min 0.365)
where its GPU time is 0.29: its forward's host time measured 109 us, the fill 0.071 ms, and KernelBench's timing
function run here gave a mean of 0.304-0.307 (min 0.287). Hence the export's bound launch.

    python benchmarks/kernelbench_timing.py --kb .kb EXPORT.py     # .kb: kernelbench/ (its timing.py) and level1_50.py
"""
import importlib.util
import statistics
import sys
import time
from pathlib import Path

import torch

kb = Path(sys.argv[sys.argv.index("--kb") + 1])
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
sys.path.insert(0, str(kb))
from kernelbench import timing

from convtune.kernels import Meta, fused_gluon

spec = importlib.util.spec_from_file_location("exported", sys.argv[-1])
m = importlib.util.module_from_spec(spec)
spec.loader.exec_module(m)
ref_spec = importlib.util.spec_from_file_location("level1_50", kb / "level1_50.py")
r = importlib.util.module_from_spec(ref_spec)
ref_spec.loader.exec_module(r)
dev = torch.device("cuda")
torch.manual_seed(42)
model = r.Model(*r.get_init_inputs()).cuda()
torch.manual_seed(42)
new = m.ModelNew(*r.get_init_inputs()).cuda()
x = r.get_inputs()[0].cuda()
with torch.no_grad():
    new(x)
    torch.cuda.synchronize()
    host = []
    for _ in range(200):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        new(x)
        host.append((time.perf_counter() - t0) * 1e6)
    torch.cuda.synchronize()
    print(f"host time of one ModelNew.forward: median {statistics.median(host):.1f} us, min {min(host):.1f} us")
    w, b = new.conv1.weight.detach(), new.conv1.bias.detach()
    lib = fused_gluon.prepared(x, w, b, 4, 2, 1, Meta(64, 128, 16, 4, 2), "tf32")
    lib()
    host = []
    for _ in range(200):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        lib()
        host.append((time.perf_counter() - t0) * 1e6)
    torch.cuda.synchronize()
    print(f"host time of one library call (bound launch): median {statistics.median(host):.1f} us")
    fill = []
    for _ in range(20):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        timing.clear_l2_cache(device=dev)
        e.record()
        torch.cuda.synchronize()
        fill.append(s.elapsed_time(e))
    print(f"KernelBench's L2 clear alone: median {statistics.median(fill):.4f} ms")
    for name, fn in (("ModelNew (the export)", new), ("library call (bound launch)", lambda _x: lib()),
                     ("Model (cuDNN)", model), ("ModelNew again", new)):
        t = timing.time_execution_with_cuda_event(fn, [x], num_warmup=3, num_trials=100, verbose=False, device=dev)
        print(f"KernelBench cuda_event timing, {name}: mean {statistics.mean(t):.4f} ms, median "
              f"{statistics.median(t):.4f}, min {min(t):.4f}, max {max(t):.4f}", flush=True)
