"""Issue 13, session 19: cache hints and the grid's grouping in nhwc_igemm, on the channels_last rows below 0.9x.

fused_gluon gained 2 % from marking its output stores evict_first (benchmarks/probe_fused_gluon_hints.py). The
channels_last rows still under 0.9x cuDNN are resnet50_layer2_3x3 (0.84-0.89x) and alexnet_conv4 (0.89x), both on
nhwc_igemm. Variants of kernels/nhwc_igemm.py, made by editing its text and importing the copy as a module of its own:
the output stores evict_first; the input tiles' loads evict_last; GROUP_M (row tiles a column tile's neighbours share)
4 and 16 instead of 8. Each at the layer's pinned or default configuration, checked bit for bit against the library's
nhwc_igemm, timed alternately twice. Prediction (before the run): within ±2 % (these layers move 25-50 MB and run
near 230-290 TFLOP/s, so L2 traffic is not what bounds them). Measured (H200, docs/evidence/h200_issue13_nhwc_hints.txt):
resnet50_layer2_3x3 stores evict_first -2 % and GROUP_M 4 -2.5 %, input loads evict_last +6 %, GROUP_M 16 +4 %;
alexnet_conv4 unreadable (the library's own binary 0.3956 and 0.4113 ms in two passes). Not taken.

    python benchmarks/probe_nhwc_hints.py
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "benchmarks"))

from edited_module import edit, import_text
from probe_kernels import load_problem

from convtune.kernels import Meta, nhwc_igemm
from convtune.measure import bench
from convtune.measure.bench import TimingSettings
from convtune.measure.one_config import make_inputs

SOURCE = (ROOT / "src" / "convtune" / "kernels" / "nhwc_igemm.py").read_text(encoding="utf-8")
STORE = "tl.store(y_ptr + y_offs, acc, mask=m_mask[:, None] & n_mask[None, :])"
LOAD = "mask=inside[:, None] & (c < C)[None, :], other=0.0)"
VARIANTS = {
    "library's text": (),
    "store evict_first": ((STORE, STORE[:-1] + ', eviction_policy="evict_first")'),),
    "input loads evict_last": ((LOAD, LOAD[:-1] + ', eviction_policy="evict_last")'),),
    "GROUP_M 4": (("GROUP_M = 8", "GROUP_M = 4"),),
    "GROUP_M 16": (("GROUP_M = 8", "GROUP_M = 16"),),
}
# (problem, configuration): the channels_last pins or defaults of the rows under 0.9x (README's pins table)
CASES = (("resnet50_layer2_3x3", Meta(64, 128, 32, 4, 3)), ("alexnet_conv4", Meta(128, 128, 32, 8, 3)))


def main() -> None:
    dev = torch.device("cuda")
    print(torch.cuda.get_device_name(), flush=True)
    torch.backends.cudnn.allow_tf32 = True
    fast = TimingSettings(rounds=7, reps=20, warmup=3)
    with tempfile.TemporaryDirectory() as tmp:
        mods = {}
        for name, edits in VARIANTS.items():
            mods[name] = import_text(name, edit(SOURCE, edits), Path(tmp))
        for problem, meta in CASES:
            p = load_problem(problem)
            x, w, b = make_inputs(p, 1, dev)
            x = x.contiguous(memory_format=torch.channels_last)
            out = torch.empty(p.output_shape, device=dev).contiguous(memory_format=torch.channels_last)
            ref = nhwc_igemm.launch(x, w, b, p.stride, p.padding, p.dilation, meta, "tf32", out=out).out.clone()
            cudnn = bench.time_gpu(lambda x=x, w=w, b=b, p=p: torch.nn.functional.conv2d(x, w, b, p.stride, p.padding),
                                   fast, dev).median_ms
            calls = {"library nhwc_igemm": nhwc_igemm.prepared(x, w, b, p.stride, p.padding, p.dilation, meta, "tf32",
                                                               out=out)}
            for name, mod in mods.items():
                call = mod.prepared(x, w, b, p.stride, p.padding, p.dilation, meta, "tf32", out=out)
                out.fill_(float("nan"))
                call()
                torch.cuda.synchronize()
                print(f"{problem} {meta.short()} {name:24s} equal to the library's output: "
                      f"{bool(torch.equal(out, ref))}", flush=True)
                calls[name] = call
            print(f"{problem}: cuDNN channels_last {cudnn:.4f} ms", flush=True)
            for rep in range(2):
                for name, fn in calls.items():
                    ms = bench.time_gpu(fn, fast, dev).median_ms
                    print(f"pass {rep + 1}: {problem} {name:24s} {ms:.4f} ms ({cudnn / ms:.2f}x)", flush=True)


if __name__ == "__main__":
    main()
