"""`python promote.py export=kernelbench`: the pinned kernel as one self-contained file in the brief's format:
imports → @triton.jit kernel(s) → wrappers (grid and launch, the pinned configuration baked in) →
`class ModelNew(nn.Module)` with the problem Model's constructor. Nothing else: no tests, no __main__.

The kernels and their pure helpers are copied from the library's source (inspect), so the file runs the
library's code; the launch wrappers are written here. Exportable: `implicit_gemm`, `fold_igemm` and `fused_gluon`
(what `kernel=library` runs on L1 #50 with NCHW input on the H200 since commit 40a431a: a Gluon kernel for Hopper, whose
file falls back to the model's own convolution anywhere else, as every exported file does off the GPU).
"""

from __future__ import annotations

import inspect
from pathlib import Path

from omegaconf import DictConfig

from convtune.problem import ConvProblem
from convtune.setup import resolve

IMPORTS = "import torch\nimport torch.nn as nn\nimport triton\nimport triton.language as tl\n"
EXPORTABLE = ("implicit_gemm", "fold_igemm", "fused_gluon")


def render_kernelbench(p: ConvProblem, meta: "object", precision: str, provenance: str,
                       kernel: str = "implicit_gemm") -> str:
    if kernel not in EXPORTABLE:
        raise ValueError(f"kernel {kernel!r} is not exportable: {', '.join(map(repr, EXPORTABLE))}")
    render = {"fold_igemm": _render_fold_igemm, "fused_gluon": _render_fused_gluon}.get(kernel, _render_implicit_gemm)
    return render(p, meta.as_dict(), precision, provenance)  # type: ignore[attr-defined]


def _source(*fns: object) -> str:
    """The source of functions, jitted ones included, one blank line pair apart."""
    return "\n\n".join(inspect.getsource(getattr(f, "fn", f)) for f in fns)  # type: ignore[arg-type]


def _rounding() -> str:
    from convtune.kernels import precision as prec

    return (f"TF32_HALF_ULP, TF32_MASK = {prec.TF32_HALF_ULP:#x}, {prec.TF32_MASK}\n\n\n"
            + _source(prec.round_to_tf32, prec.round_tf32))


def _pinned(m: dict, precision: str, provenance: str, p: ConvProblem) -> str:
    from convtune.kernels import precision as prec

    rule = "operands rounded to nearest TF32, as cuDNN rounds" if prec.rounds_operands(precision) else "as tl.dot does it"
    return f'''
# Pinned configuration ({provenance}); no autotuning.
BLOCK_M, BLOCK_N, BLOCK_K, NUM_WARPS, NUM_STAGES = {m["BLOCK_M"]}, {m["BLOCK_N"]}, {m["BLOCK_K"]}, {m["num_warps"]}, {m["num_stages"]}
# precision {precision}: {rule}
PRECISION, ROUND = "{prec.dot_precision(precision)}", {prec.rounds_operands(precision)}
STRIDE, PADDING, DILATION = {tuple(p.stride)}, {tuple(p.padding)}, {tuple(p.dilation)}
'''


def _model_new(p: ConvProblem, forward_body: str) -> str:
    """ModelNew: the reference Model's nn.Conv2d, made first (so that it draws the same parameters after the same
    seed), and the forward body given."""
    return f'''

class ModelNew(nn.Module):
    def __init__(self, num_classes=1000):
        super(ModelNew, self).__init__()
        self.conv1 = nn.Conv2d(in_channels={p.in_channels}, out_channels={p.out_channels}, kernel_size=({p.kernel_h}, {p.kernel_w}),
                               stride={tuple(p.stride)}, padding={tuple(p.padding)}, dilation={tuple(p.dilation)}, bias={p.bias})
        self._packed, self._packed_for = None, None

    def forward(self, x):
        if not x.is_cuda:
            return self.conv1(x)
{forward_body}'''


def _render_implicit_gemm(p: ConvProblem, m: dict, precision: str, provenance: str) -> str:
    from convtune.kernels import implicit_gemm as ig

    wrapper = _pinned(m, precision, provenance, p) + f'''

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
''' + _model_new(p, f'''\
        x, w = x.contiguous(), self.conv1.weight
        vec = choose_vec(x, x.shape[3], STRIDE[1], DILATION[1], "{precision}")
        key = (w.data_ptr(), w._version, vec)  # pad and round the weight again only when it changes
        if self._packed_for != key:
            self._packed, self._packed_for = pack_weight(w.detach(), PADDING[1], vec, ROUND), key
        return conv2d_triton(x, w, self.conv1.bias, self._packed)
''')
    return "\n\n".join((IMPORTS, _rounding(), _source(ig._conv2d_igemm_kernel),
                        _source(ig.choose_vec, ig.row_window, ig.pack_weight))) + "\n" + wrapper


def _render_fold_igemm(p: ConvProblem, m: dict, precision: str, provenance: str) -> str:
    from convtune.kernels import fold_igemm as fi

    wrapper = _pinned(m, precision, provenance, p) + f'''FOLD_BLOCK, FOLD_TILE = {fi.FOLD_BLOCK}, {fi.FOLD_TILE}


def fold_geometry(x_shape, w_shape):
    """(OH, OW, KHF, KWF, HF, WF, CF, ROW_PAD) of the stride-1 convolution over the input folded by the stride."""
    n, c, h, w = x_shape
    c_out, _, kh, kw = w_shape
    oh = (h + 2 * PADDING[0] - kh) // STRIDE[0] + 1
    ow = (w + 2 * PADDING[1] - kw) // STRIDE[1] + 1
    khf, kwf = -(-kh // STRIDE[0]), -(-kw // STRIDE[1])
    cf = folded_channels(c, STRIDE)
    return oh, ow, khf, kwf, oh + khf - 1, ow + kwf - 1, cf, -(-kwf * cf // BLOCK_K) * BLOCK_K


def pack_weight(weight, x_shape):
    """The folded weight [C_out, KHF·ROW_PAD] (fold_weight), rounded to nearest TF32 for tf32."""
    _, _, khf, kwf, _, _, cf, row_pad = fold_geometry(x_shape, weight.shape)
    wp = fold_weight(weight, STRIDE, (khf, kwf), cf, row_pad)
    return round_to_tf32(wp) if ROUND else wp


def conv2d_triton(x, weight, bias, packed=None):
    """Fold x (NCHW or channels_last, as it is) by the stride, then the stride-1 GEMM over it with TMA operands.
    `packed`: pack_weight's result for this weight, made here when not given."""
    n, c, h, w = x.shape
    c_out = weight.shape[0]
    oh, ow, khf, kwf, hf, wf, cf, row_pad = fold_geometry(x.shape, weight.shape)
    in_cl = not x.is_contiguous() and x.is_contiguous(memory_format=torch.channels_last)
    x = x if in_cl else x.contiguous()
    rows = folded_rows(n * hf * wf)
    xf = torch.empty((rows + kwf - 1) * cf, device=x.device, dtype=torch.float32)
    fold_args = dict(C=c, H=h, W=w, IN_CL=in_cl, SH=STRIDE[0], SW=STRIDE[1], PH=PADDING[0], PW=PADDING[1], HF=hf, WF=wf,
                     CF=cf, ROUND=ROUND)
    tiling = fold_tiling(cf, STRIDE, wf)
    if tiling:  # a tile of input rows a program, permuted in registers
        _fold_rows_kernel[(hf * triton.cdiv(wf, tiling[1]), n)](x, xf, **fold_args, CP=tiling[0], WB=tiling[1],
                                                                 num_warps=8)
    else:  # a stride that is not a power of two: element by element
        _fold_kernel[(triton.cdiv(hf * wf * cf, FOLD_BLOCK), n)](x, xf, **fold_args, BLOCK=FOLD_BLOCK, num_warps=4)
    wp = packed if packed is not None else pack_weight(weight, x.shape)
    split = split_columns(c_out, BLOCK_N)
    a = TensorDescriptor(xf, [rows, kwf * cf], [cf, 1], [BLOCK_M, BLOCK_K])  # overlapping rows, row stride CF
    if split:
        w1 = TensorDescriptor.from_tensor(wp, [BLOCK_N // 2, BLOCK_K])
        w2 = TensorDescriptor.from_tensor(wp, [BLOCK_N // 4, BLOCK_K])
    else:
        w1 = w2 = TensorDescriptor.from_tensor(wp, [BLOCK_N, BLOCK_K])
    out = torch.empty((n, c_out, oh, ow), device=x.device, dtype=torch.float32)
    columns = BLOCK_N * 3 // 4 if split else BLOCK_N
    grid = (n * triton.cdiv(oh * wf, BLOCK_M) * triton.cdiv(c_out, columns),)
    _conv2d_fold_kernel[grid](
        a, w1, w2, bias if bias is not None else wp, out,
        HF=hf, WF=wf, OH=oh, OW=ow, C_OUT=c_out, KHF=khf, ROW_PAD=row_pad, HAS_BIAS=bias is not None,
        PRECISION=PRECISION, OUT_CL=False, SPLIT=split, BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K,
        num_warps=NUM_WARPS, num_stages=NUM_STAGES,
        LLVM_OPT="O3",  # Triton's own level: every size is a constexpr, so the judge's check covers this binary
    )
    return out
''' + _model_new(p, '''\
        w = self.conv1.weight
        key = (w.data_ptr(), w._version, x.shape[1])  # fold and round the weight again only when it changes
        if self._packed_for != key:
            self._packed, self._packed_for = pack_weight(w.detach(), x.shape), key
        return conv2d_triton(x, w, self.conv1.bias, self._packed)
''')
    imports = IMPORTS + "from typing import Optional\n\nfrom triton.tools.tensor_descriptor import TensorDescriptor\n"
    kernels = _source(fi._fold_kernel, fi._fold_rows_kernel, fi._conv2d_fold_kernel, fi._store)
    helpers = _source(fi.folded_channels, fi.split_columns, fi.fold_tiling, fi.folded_rows, fi.fold_weight)
    return "\n\n".join((imports, _rounding(), kernels, helpers)) + "\n" + wrapper


def _render_fused_gluon(p: ConvProblem, m: dict, precision: str, provenance: str) -> str:
    from convtune.kernels import fold_igemm as fi
    from convtune.kernels import fused_gluon as fg

    kernel_file = (Path(fg.__file__).parent / "fused_gluon_kernel.py").read_text(encoding="utf-8")
    kernels = kernel_file[kernel_file.index("# TMA's global"):].rstrip()  # the module after its docstring and imports
    wrapper = f'''
# Pinned configuration ({provenance}); no autotuning.
# precision {precision}: operands rounded to nearest TF32 (ties away), as cuDNN rounds on this layer
NUM_STAGES = {m["num_stages"]}  # MMA warpgroups an SM (the design fixes BLOCK_M 64, BLOCK_N 64 + 32, BLOCK_K 16, a warpgroup's 4 warps)
REGISTERS = {fg.REGISTERS}  # a thread's registers by MMA warpgroups
CARVEOUT = {fg.CARVEOUT}  # percent of the SM's unified memory asked for as shared memory: L1 keeps the input rows
STRIDE, PADDING, COLUMNS = {tuple(p.stride)}, {tuple(p.padding)}, {fg.COLUMNS}
WINDOW_ROWS = {fg.WINDOW_ROWS}  # the folded kernel's rows as the kernel takes them (zero rows below)
# launch keys (shapes, bias, device, 16-byte alignments) → the compiled kernel's launcher and its constexprs: after the
# first call a launch skips Triton's per-call dispatch (the forward's host time: 109 us through it, 20 us for the
# library's bound launch on the H200; KernelBench times each call alone after a 0.07 ms L2 clear, so host time past
# that shows in its runtime; commit 517fd9f)
_launches = {{}}


def pack_weight(weight):
    """[C_out, 3, KH, KW] → [COLUMNS, KHF·KWF·48] in the gather's K order, rounded to nearest TF32, zero rows past
    C_out; with the TMA descriptors of its two column tiles."""
    taps = (WINDOW_ROWS, -(-weight.shape[3] // STRIDE[1]))
    cf = folded_channels(weight.shape[1], STRIDE)
    wp = fold_weight(weight, STRIDE, taps, cf, taps[1] * cf)
    wp = round_to_tf32(torch.nn.functional.pad(wp, (0, 0, 0, COLUMNS - wp.shape[0]))).contiguous()
    return (wp,) + descriptors(wp)


def conv2d_gluon(x, weight, bias, packed):
    """x NCHW-contiguous on a Hopper GPU; `packed`: pack_weight(weight)."""
    n, c, h, w = x.shape
    c_out, _, kh, kw = weight.shape
    oh = (h + 2 * PADDING[0] - kh) // STRIDE[0] + 1
    ow = (w + 2 * PADDING[1] - kw) // STRIDE[1] + 1
    out = torch.empty((n, c_out, oh, ow), device=x.device, dtype=torch.float32)
    _, w1, w2 = packed
    b = bias if bias is not None else out
    key = (x.shape, c_out, kh, kw, bias is not None, x.device, x.data_ptr() % 16, b.data_ptr() % 16,
           out.data_ptr() % 16)
    bound = _launches.get(key)
    if bound is not None:
        launcher, constexprs = bound
        launcher(x, w1, w2, b, out, n * oh, *constexprs)
        return out
    grid = (min(n * oh, torch.cuda.get_device_properties(x.device).multi_processor_count),)
    constexprs = dict(NWG=NUM_STAGES, REGS=REGISTERS[NUM_STAGES], C=c, H=h, W=w, OH=oh, OW=ow, C_OUT=c_out,
                      PH=PADDING[0], PW=PADDING[1], SH=STRIDE[0], SW=STRIDE[1], KHF=WINDOW_ROWS,
                      KWF=-(-kw // STRIDE[1]), HAS_BIAS=bias is not None, OUT_CL=False,
                      LLVM_OPT="O3")  # Triton's own level: every size is a constexpr, so the judge's check covers it
    k = _conv2d_fused_gluon_kernel[grid](x, w1, w2, b, out, n * oh, **constexprs, num_warps=4,
                                         maxnreg=REGISTERS[NUM_STAGES])
    # the binary is loaded now: its later launches run with the carveout
    ctypes.CDLL("libcuda.so.1").cuFuncSetAttribute(ctypes.c_void_p(k.function), 9, ctypes.c_int(CARVEOUT))
    if hasattr(type(k), "__getitem__"):  # this Triton's compiled kernel gives its launcher: bind it
        names = _conv2d_fused_gluon_kernel.arg_names[6:]
        _launches[key] = (k[grid + (1, 1)], tuple(constexprs[name] for name in names))
    return out
''' + _model_new(p, '''\
        if torch.cuda.get_device_capability(x.device) != (9, 0):  # Gluon's wgmma and TMA: Hopper only
            return self.conv1(x)
        w = self.conv1.weight
        key = (w.data_ptr(), w._version)  # fold and round the weight again only when it changes
        if self._packed_for != key:
            self._packed, self._packed_for = pack_weight(w.detach()), key
        return conv2d_gluon(x.contiguous(), w, self.conv1.bias, self._packed)
''')
    imports = IMPORTS + ("import ctypes\n\nfrom triton.experimental import gluon\nfrom triton.experimental.gluon import "
                         "language as gl\nfrom triton.experimental.gluon.language.nvidia.hopper import mbarrier, tma, "
                         "warpgroup_mma, warpgroup_mma_wait\n")
    helpers = _source(fi.folded_channels, fi.fold_weight)
    return "\n\n".join((imports, _rounding(), kernels, helpers)) + "\n" + wrapper


def run_export(cfg: DictConfig) -> int:
    if cfg.export != "kernelbench":
        print(f"error: export={cfg.export!r} is not allowed: 'kernelbench'")
        return 1
    setup = resolve(cfg, swap_problem=False)  # the problem as named: writing the file runs no kernel
    setup.raise_error()
    if setup.kernel_name not in EXPORTABLE:  # kernel=library resolves per problem (setup)
        runs = "" if setup.kernel_name == cfg.kernel.name else f" (runs {setup.kernel_name} for this problem)"
        print(f"error: kernel={cfg.kernel.name!r}{runs} is not exportable: {', '.join(map(repr, EXPORTABLE))}")
        return 1
    # the configured (pinned or default) configuration, as the library would run it
    p, meta, source, precision = setup.problem, setup.configured_meta, setup.configured_source, setup.precision
    if setup.kernel_name == "fold_igemm" and tuple(p.dilation) != (1, 1):
        print(f"error: fold_igemm takes dilation 1 only, got {list(p.dilation)}: nothing exported")
        return 1
    if setup.kernel_name == "fused_gluon":
        refused = _fused_gluon_refuses(p, meta, precision)
        if refused:
            print(f"error: {refused}: nothing exported")
            return 1
    out = Path(cfg.export_path) if cfg.export_path else setup.cwd / "exports" / f"{p.name}.py"
    out = out if out.is_absolute() else setup.cwd / out
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(render_kernelbench(p, meta, precision, f"{source}; {meta.short()}", setup.kernel_name))
    print(f"wrote {out}: {p.name}, {setup.kernel_name} {meta.label()} ({source}), precision {precision}")
    if setup.interpreted:
        print("not checked: no GPU here (on a GPU the file is checked as KernelBench checks it)")
        return 0
    from convtune.measure.kbcheck import check_file

    verdict = check_file(out, p)
    print(verdict.report())
    return 0 if verdict.correct else 1


def _fused_gluon_refuses(p: ConvProblem, meta: object, precision: str) -> str:
    """Why fused_gluon cannot run the problem (its make_plan's message), or ''."""
    import torch

    from convtune.errors import ConfigError, UnsupportedProblem
    from convtune.kernels import fused_gluon as fg
    from convtune.kernels.common import geometry

    x = torch.empty(p.batch, p.in_channels, p.height, p.width, device="meta")
    w = torch.empty(p.out_channels, p.in_channels, p.kernel_h, p.kernel_w, device="meta")
    try:
        fg.make_plan(geometry(x, w, tuple(p.stride), tuple(p.padding), tuple(p.dilation)), p.bias, meta, precision)  # type: ignore[arg-type]
    except (UnsupportedProblem, ConfigError) as e:
        return str(e)
    return ""
