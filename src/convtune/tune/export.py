"""`python promote.py export=kernelbench`: the pinned kernel as one self-contained file in the brief's format:
imports → @triton.jit kernel → wrappers (grid and launch, the pinned configuration baked in) →
`class ModelNew(nn.Module)` with the problem Model's constructor. Nothing else: no tests, no __main__.
"""

from __future__ import annotations

import inspect
from pathlib import Path

from omegaconf import DictConfig

from convtune.problem import ConvProblem
from convtune.setup import resolve

IMPORTS = "import torch\nimport torch.nn as nn\nimport triton\nimport triton.language as tl\n"


def render_kernelbench(p: ConvProblem, meta: "object", precision: str, provenance: str) -> str:
    from convtune.kernels import implicit_gemm as ig
    from convtune.kernels import precision as prec

    kernel_src = inspect.getsource(ig._conv2d_igemm_kernel.fn)
    rounding = (f"TF32_HALF_ULP, TF32_MASK = {prec.TF32_HALF_ULP:#x}, {prec.TF32_MASK}\n\n\n"
                + inspect.getsource(prec.round_to_tf32) + "\n\n" + inspect.getsource(prec.round_tf32.fn))
    helpers = "\n\n".join(inspect.getsource(f) for f in (ig.choose_vec, ig.row_window, ig.pack_weight))
    m = meta.as_dict()  # type: ignore[attr-defined]
    wrapper = f'''
# Pinned configuration ({provenance}); no autotuning.
BLOCK_M, BLOCK_N, BLOCK_K, NUM_WARPS, NUM_STAGES = {m["BLOCK_M"]}, {m["BLOCK_N"]}, {m["BLOCK_K"]}, {m["num_warps"]}, {m["num_stages"]}
# precision {precision}: {"operands rounded to nearest TF32, as cuDNN rounds" if prec.rounds_operands(precision) else "as tl.dot does it"}
PRECISION, ROUND = "{prec.dot_precision(precision)}", {prec.rounds_operands(precision)}
STRIDE, PADDING, DILATION = {tuple(p.stride)}, {tuple(p.padding)}, {tuple(p.dilation)}


def conv2d_triton(x, weight, bias, packed=None):
    """`packed`: pack_weight's (weight, KWP, J0) for this input's vector width, made here when not given."""
    n, c, h, w = x.shape
    c_out, _, kh, kw = weight.shape
    oh = (h + 2 * PADDING[0] - DILATION[0] * (kh - 1) - 1) // STRIDE[0] + 1
    ow = (w + 2 * PADDING[1] - DILATION[1] * (kw - 1) - 1) // STRIDE[1] + 1
    out = torch.empty((n, c_out, oh, ow), device=x.device, dtype=torch.float32)
    vec = choose_vec(x, w, STRIDE[1], DILATION[1], "{precision}")
    wp, kwp, j0 = packed if packed is not None else pack_weight(weight, PADDING[1], vec, ROUND)
    grid = (n * triton.cdiv(oh * ow, BLOCK_M), triton.cdiv(c_out, BLOCK_N))
    _conv2d_igemm_kernel[grid](
        x, wp, bias if bias is not None else x, out,
        C=c, H=h, W=w, C_OUT=c_out, OH=oh, OW=ow, KH=kh, KWP=kwp, J0=j0, SH=STRIDE[0], SW=STRIDE[1],
        PH=PADDING[0], DH=DILATION[0], DW=DILATION[1], VEC=vec, HAS_BIAS=bias is not None, PRECISION=PRECISION,
        ROUND_A=ROUND, OUT_CL=False, BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K, num_warps=NUM_WARPS, num_stages=NUM_STAGES,
        LLVM_OPT="O3",  # Triton's own level: every size is a constexpr, so the judge's check covers this binary
    )
    return out


class ModelNew(nn.Module):
    def __init__(self, num_classes=1000):
        super(ModelNew, self).__init__()
        self.conv1 = nn.Conv2d(in_channels={p.in_channels}, out_channels={p.out_channels}, kernel_size=({p.kernel_h}, {p.kernel_w}),
                               stride={tuple(p.stride)}, padding={tuple(p.padding)}, dilation={tuple(p.dilation)}, bias={p.bias})
        self._packed, self._packed_for = None, None

    def forward(self, x):
        if not x.is_cuda:
            return self.conv1(x)
        x, w = x.contiguous(), self.conv1.weight
        vec = choose_vec(x, x.shape[3], STRIDE[1], DILATION[1], "{precision}")
        key = (w.data_ptr(), w._version, vec)  # pad and round the weight again only when it changes
        if self._packed_for != key:
            self._packed, self._packed_for = pack_weight(w.detach(), PADDING[1], vec, ROUND), key
        return conv2d_triton(x, w, self.conv1.bias, self._packed)
'''
    return IMPORTS + "\n\n" + rounding + "\n\n" + kernel_src + "\n\n" + helpers + "\n" + wrapper


def run_export(cfg: DictConfig) -> int:
    if cfg.export != "kernelbench":
        print(f"error: export={cfg.export!r} is not allowed: 'kernelbench'")
        return 1
    setup = resolve(cfg, swap_problem=False)  # the problem as named: writing the file runs no kernel
    setup.raise_error()
    if setup.kernel_name != "implicit_gemm":  # kernel=library resolves per problem (setup)
        runs = "" if setup.kernel_name == cfg.kernel.name else f" (runs {setup.kernel_name} for this problem)"
        print(f"error: kernel={cfg.kernel.name!r}{runs} is not exportable: 'implicit_gemm'")
        return 1
    # the configured (pinned or default) configuration, as the library would run it
    p, meta, source, precision = setup.problem, setup.configured_meta, setup.configured_source, setup.precision
    out = Path(cfg.export_path) if cfg.export_path else setup.cwd / "exports" / f"{p.name}.py"
    out = out if out.is_absolute() else setup.cwd / out
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(render_kernelbench(p, meta, precision, f"{source}; {meta.short()}"))
    print(f"wrote {out}: {p.name}, {meta.label()} ({source}), precision {precision}")
    if setup.interpreted:
        print("not checked: no GPU here (on a GPU the file is checked as KernelBench checks it)")
        return 0
    from convtune.measure.kbcheck import check_file

    verdict = check_file(out, p)
    print(verdict.report())
    return 0 if verdict.correct else 1
