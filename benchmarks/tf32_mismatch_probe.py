"""Why does a `tf32` output sometimes miss torch's by KernelBench's allclose although both are equally accurate?

For each `tf32` case that `convtune.verify` reported as torch_mismatch, this rebuilds its tensors and compares
four results elementwise: convtune (tf32), torch's own convolution at its defaults (cuDNN TF32), the exact
result of the operands rounded to nearest TF32 (what cuDNN's rounding predicts, computed in float64), and that
of the operands truncated to TF32. Whichever of convtune and cuDNN sits next to the rounded-exact result
computes what the rounding rule says; the other one does something else. GPU only.

    python benchmarks/tf32_mismatch_probe.py verify_a.jsonl [verify_b.jsonl ...]
"""

import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from convtune.kernels import Meta, get_variant  # noqa: E402
from convtune.kernels.precision import round_to_tf32  # noqa: E402
from convtune.verify import case_tensors, read_cases  # noqa: E402


def truncate_to_tf32(t: torch.Tensor) -> torch.Tensor:
    return (t.contiguous().view(torch.int32) & -8192).view(torch.float32)


def exact(x, w, b, case) -> torch.Tensor:
    y = torch.nn.functional.conv2d(x.double(), w.double(), None, case.stride, case.padding, case.dilation)
    return y if b is None else y + b.double().view(1, -1, 1, 1)


def main() -> None:
    cases = [c for path in sys.argv[1:] for c in read_cases(path, ("torch_mismatch",)) if c.precision == "tf32"]
    dev = torch.device("cuda")
    print(f"{torch.cuda.get_device_name()} · torch {torch.__version__} · cuDNN {torch.backends.cudnn.version()}"
          f" · {len(cases)} tf32 torch_mismatch cases")
    print("max |diff| of: convtune−cuDNN | convtune−rounded exact | cuDNN−rounded exact | cuDNN−truncated exact"
          " | cuDNN (benchmark=True)−rounded exact | case")
    for case in cases:
        p, x, w, b = case_tensors(case, dev)
        variant = get_variant(case.variant)
        meta = Meta(**case.meta) if case.meta else variant.default_meta(case.k, case.stride[1], case.w, "tf32")
        ours = torch.empty(p.output_shape, device=dev)
        variant.launch(x, w, b, case.stride, case.padding, case.dilation, meta, "tf32", out=ours)
        torch.backends.cudnn.allow_tf32 = True
        torch.backends.cudnn.benchmark = False
        cudnn = torch.nn.functional.conv2d(x, w, b, case.stride, case.padding, case.dilation)
        torch.backends.cudnn.benchmark = True
        cudnn_bench = torch.nn.functional.conv2d(x, w, b, case.stride, case.padding, case.dilation)
        torch.backends.cudnn.benchmark = False
        rounded = exact(round_to_tf32(x), round_to_tf32(w), b, case)
        truncated = exact(truncate_to_tf32(x), truncate_to_tf32(w), b, case)

        def d(a, r):
            return f"{(a.double() - r.double()).abs().max().item():.2e}"
        print(f"{d(ours, cudnn)} | {d(ours, rounded)} | {d(cudnn, rounded)} | {d(cudnn, truncated)} | "
              f"{d(cudnn_bench, rounded)} | {case.label()}", flush=True)


if __name__ == "__main__":
    main()
