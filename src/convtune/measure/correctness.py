"""Is an output correct? Two references, one verdict.

- float64: `torch.nn.functional.conv2d` in double precision, i.e. how far from exact. The relative L2 error
  must be within the precision's tolerance (convtune.config.TOLERANCE); a wrong index gives errors of order 1.
- torch at its own settings for that precision, compared the way KernelBench's judge compares
  (`torch.allclose(reference, ours, atol=1e-4, rtol=1e-4)`, kernelbench.eval): cuDNN with TF32 on (torch's default for
  fp32 convolutions) for `tf32` and `tf32_trunc`, TF32 off for `tf32x3` and `ieee`. CPU torch has no TF32, so
  without a GPU cuDNN's TF32 is emulated: operands rounded to nearest TF32, then convolved in float64 (that
  reproduced cuDNN's output within 2.3e-6 on L1 #50); the `torch_reference` tag says which was used.

`check=float64` judges by the first only; `check=kernelbench` (the default) requires both, because a
configuration the judge would reject must never become a candidate or a pin.

A bfloat16 or float16 problem is compared with torch's convolution at its dtype (cuDNN's half-precision algorithms on
a GPU; float32's math mode does not apply) by KernelBench's tolerance for that precision (atol = rtol = 1e-2,
`get_tolerance_for_precision`), and its float64-referenced error must also be no worse than torch's own, within
HALF_ERROR_MARGIN: both are dominated by rounding the output to 16 bits once, and a kernel that rounded an
intermediate (a partial sum, the bias) would show as a larger error than torch's while still inside allclose. An
epilogue's chain rounds each op's result to 16 bits, in torch as in the kernels, so where an op cancels (bn's shift
against the sum) torch's own error can pass the dtype's tolerance: bfloat16 `scale,bn,relu` after a 3x1 convolution
of 4 channels, 200 random draws on the CPU, was above 1e-2 in 19. There an output within HALF_ERROR_MARGIN of torch's
error passes the float64 check too.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

import torch
import torch.nn.functional as F

from convtune.measure import bench
from convtune.kernels.epilogue import NO_EPILOGUE, Epilogue, torch_chain
from convtune.kernels.precision import cudnn_tf32_ties, host_rounding, torch_uses_tf32
from convtune.problem import ConvProblem
from convtune.record import Metric, Tag

KB_ATOL = KB_RTOL = 1e-4  # kernelbench.eval, fp32
KB_HALF_TOLERANCE = 1e-2  # kernelbench.eval's get_tolerance_for_precision for bfloat16 and float16 (atol = rtol)
# How much larger than torch's own float64-referenced error a half-precision output's may be: both round the same
# float32 sums to 16 bits, so they differ by the few outputs whose sums differ across a rounding boundary
HALF_ERROR_MARGIN = 1.1
CHECKS = ("kernelbench", "float64")


@dataclass
class Verdict:
    ok: bool
    message: str
    metrics: dict[str, float] = field(default_factory=dict)
    tags: dict[str, str] = field(default_factory=dict)
    unwritten: int = 0


def _chain_of(p: ConvProblem, epilogue: Epilogue) -> None:
    if tuple(p.epilogue) != epilogue.chain:
        raise ValueError(f"the problem's epilogue is {list(p.epilogue)}, the tensors given are for "
                         f"{list(epilogue.chain)}")


def reference(p: ConvProblem, x: torch.Tensor, w: torch.Tensor, b: Optional[torch.Tensor],
              epilogue: Epilogue = NO_EPILOGUE) -> torch.Tensor:
    """The convolution and its epilogue in float64."""
    _chain_of(p, epilogue)
    y = F.conv2d(x.double(), w.double(), None if b is None else b.double(), p.stride, p.padding, p.dilation)
    return torch_chain(y, epilogue, torch.float64) if epilogue.chain else y


def torch_output(p: ConvProblem, x: torch.Tensor, w: torch.Tensor, b: Optional[torch.Tensor],
                 precision: str, epilogue: Epilogue = NO_EPILOGUE) -> tuple[torch.Tensor, str]:
    """What a user's torch computes for this precision (and the inputs' dtype), and a label saying what that was: the
    convolution, then each op of the epilogue in the output's dtype (kernels/epilogue.torch_chain)."""
    _chain_of(p, epilogue)
    y, label = _torch_conv(p, x, w, b, precision)
    if not epilogue.chain:
        return y, label
    return torch_chain(y, epilogue), f"{label}, then {', '.join(epilogue.chain)} in torch"


def _torch_conv(p: ConvProblem, x: torch.Tensor, w: torch.Tensor, b: Optional[torch.Tensor],
                precision: str) -> tuple[torch.Tensor, str]:
    if x.dtype != torch.float32:
        y = F.conv2d(x, w, b, p.stride, p.padding, p.dilation)
        return y, f"{'cuDNN' if x.is_cuda else 'torch CPU'} {p.dtype} (torch {torch.__version__})"
    tf32 = torch_uses_tf32(precision)
    if x.is_cuda:
        # torch's defaults, as KernelBench runs its reference Model: benchmark off, TF32 as the precision says
        with torch.backends.cudnn.flags(enabled=True, benchmark=False, deterministic=False, allow_tf32=tf32):
            y = F.conv2d(x, w, b, p.stride, p.padding, p.dilation)
        return y, f"cuDNN {'TF32' if tf32 else 'fp32'} (torch {torch.__version__})"
    if tf32:
        ties = cudnn_tf32_ties(p.stride)
        r = host_rounding(ties)
        y = F.conv2d(r(x).double(), r(w).double(), None if b is None else b.double(), p.stride, p.padding, p.dilation)
        return y.float(), f"emulated cuDNN TF32 (operands rounded to nearest, ties {ties}, float64 sum)"
    return F.conv2d(x, w, b, p.stride, p.padding, p.dilation), "torch CPU fp32"


def judge(out: torch.Tensor, p: ConvProblem, x: torch.Tensor, w: torch.Tensor, b: Optional[torch.Tensor],
          precision: str, tol: float, check: str = "kernelbench", epilogue: Epilogue = NO_EPILOGUE) -> Verdict:
    """Judge an output that was poisoned with NaN before the launch: the convolution followed by `epilogue` (the
    problem's chain, with its tensors). Records both references' numbers whatever `check` says; `check` decides which
    of them can fail the output."""
    if check not in CHECKS:
        raise ValueError(f"check={check!r} is not allowed: one of {list(CHECKS)}")
    ref = reference(p, x, w, b, epilogue)
    c = bench.check_output(out, ref, tol)  # unwritten (NaN) elements, shape, relative L2 error
    ref_note = "float64 on the GPU" if ref.is_cuda else "float64 on the CPU"
    if not c.ok and ref.is_cuda and not c.unwritten and c.rel_err == c.rel_err:
        # Confirm a failure against the CPU before calling it one: the GPU's float64 result is a GPU kernel too.
        ref_cpu = reference(p, x.cpu(), w.cpu(), None if b is None else b.cpu(), epilogue.to("cpu"))
        c_cpu = bench.check_output(out.cpu(), ref_cpu, tol)
        if c_cpu.ok:
            off = float(torch.linalg.vector_norm(ref.cpu() - ref_cpu) / torch.linalg.vector_norm(ref_cpu).clamp_min(1e-300))
            ref_note = f"float64 on the CPU (the GPU's float64 result was off by {off:.3g})"
            ref, c = ref_cpu.to(ref.device), c_cpu
    if c.unwritten or c.rel_err != c.rel_err:  # not written, or not comparable: nothing more to learn
        return Verdict(False, c.message, {Metric.REL_ERR: c.rel_err, Metric.UNWRITTEN_OUTPUTS: c.unwritten},
                       unwritten=c.unwritten)
    rel = c.rel_err
    theirs, label = torch_output(p, x, w, b, precision, epilogue)
    torch_rel = float(torch.linalg.vector_norm(theirs.double() - ref) / torch.linalg.vector_norm(ref).clamp_min(1e-300))
    del ref
    half = out.dtype != torch.float32
    kb_tol = KB_HALF_TOLERANCE if half else KB_ATOL
    max_abs = float((out.float() - theirs.float()).abs().max()) if out.numel() else 0.0
    matches = bool(torch.allclose(theirs, out, atol=kb_tol, rtol=kb_tol))
    del theirs
    # torch_rel_err tells how torch itself computed: ~1e-7 means cuDNN ran true fp32 there (no TF32 to match)
    metrics = {Metric.REL_ERR: rel, Metric.MAX_ABS_ERR_VS_TORCH: max_abs, Metric.MATCHES_TORCH: float(matches),
               Metric.TORCH_REL_ERR: torch_rel}
    tags = {Tag.TORCH_REFERENCE: label, Tag.FLOAT64_REFERENCE: ref_note}
    as_good_as_torch = half and rel <= HALF_ERROR_MARGIN * torch_rel  # the 16-bit bar (the module's doc)
    if not rel <= tol and not as_good_as_torch:
        bar = f" nor {HALF_ERROR_MARGIN}x torch's own {torch_rel:.3g} ({label})" if half else ""
        return Verdict(False, f"relative L2 error {rel:.3g} > tolerance {tol:.0e}{bar}", metrics, tags)
    if check == "kernelbench" and half and not as_good_as_torch:
        return Verdict(False, f"relative L2 error {rel:.3g} is worse than torch's own {torch_rel:.3g} ({label}) by more "
                              f"than {HALF_ERROR_MARGIN}x", metrics, tags)
    if check == "kernelbench" and not matches:
        return Verdict(False, f"does not match torch ({label}) by KernelBench's allclose(atol=rtol={kb_tol:.0e}): "
                              f"max |diff| {max_abs:.3g} (check=float64 judges by the float64 reference only)",
                       metrics, tags)
    within = (f"<= {tol:.0e}" if rel <= tol
              else f"past {tol:.0e} but within {HALF_ERROR_MARGIN}x torch's own {torch_rel:.3g}")
    return Verdict(True, f"relative L2 error {rel:.3g} {within}; "
                         f"{'matches' if matches else 'does not match'} torch (max |diff| {max_abs:.3g})", metrics, tags)
