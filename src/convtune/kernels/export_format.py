"""The KernelBench one-file format's common parts, for the variants that can be exported (KernelVariant.export):
imports → @triton.jit kernel(s) → wrappers (grid and launch, the pinned configuration baked in) →
`class ModelNew(nn.Module)` with the problem Model's constructor. The kernels and their pure helpers are copied from
the library's source (inspect), so the file runs the library's code. Pure text; `p` is a convtune.problem.ConvProblem.
"""

from __future__ import annotations

import inspect
from typing import Any

IMPORTS = "import torch\nimport torch.nn as nn\nimport triton\nimport triton.language as tl\n"


def source_of(*fns: object) -> str:
    """The source of functions, jitted ones included, one blank line pair apart."""
    return "\n\n".join(inspect.getsource(getattr(f, "fn", f)) for f in fns)  # type: ignore[arg-type]


def rounding_source() -> str:
    from convtune.kernels import precision as prec

    return (f"TF32_HALF_ULP, TF32_MASK = {prec.TF32_HALF_ULP:#x}, {prec.TF32_MASK}\n\n\n"
            + source_of(prec.round_to_tf32, prec.round_tf32))


def epilogue_source() -> str:
    """The epilogue's jit functions (kernels/epilogue.py), which an exported kernel calls (with no chain: EPILOGUE=0)."""
    from convtune.kernels import epilogue

    return source_of(epilogue._apply_op, epilogue.apply_epilogue)


def pinned_block(m: dict, precision: str, provenance: str, p: Any) -> str:
    from convtune.kernels import precision as prec

    precision = prec.kernel_precision(precision, p.dtype)  # a 16-bit problem: its operands as they are
    rule = "operands rounded to nearest TF32, as cuDNN rounds" if prec.rounds_operands(precision) else "as tl.dot does it"
    what = (f"{p.dtype} tensors (KernelBench's precision={ {'bfloat16': 'bf16', 'float16': 'fp16'}[p.dtype]}): their "
            "16-bit MMA, float32 sums" if p.dtype != "float32" else f"precision {precision}: {rule}")
    return f'''
# Pinned configuration ({provenance}); no autotuning.
BLOCK_M, BLOCK_N, BLOCK_K, NUM_WARPS, NUM_STAGES = {m["BLOCK_M"]}, {m["BLOCK_N"]}, {m["BLOCK_K"]}, {m["num_warps"]}, {m["num_stages"]}
# {what}
PRECISION, ROUND = "{prec.dot_precision(precision)}", {prec.rounds_operands(precision)}
STRIDE, PADDING, DILATION = {tuple(p.stride)}, {tuple(p.padding)}, {tuple(p.dilation)}
'''


def level2_chain(p: Any) -> tuple[str, ...]:
    """The epilogue of a problem exported to KernelBench's level-2 format (a Model whose forward is the convolution
    and then each op, as #1 Conv2D_ReLU_BiasAdd and #73 Conv2d_BatchNorm_Scaling), or UnsupportedProblem: activations,
    at most one `bias` (the Model's nn.Parameter of shape (C_out, 1, 1) drawn with torch.randn after the convolution's
    parameters), `bn_train` (the Model's nn.BatchNorm2d `bn`, in training mode as KernelBench runs it) and at most one
    `scale` (the Model's `scaling_factor`, its last init input). `bn` is refused (a Model's batch norm trains: bn_train),
    and so is `add` (a second input)."""
    from convtune.errors import UnsupportedProblem

    refused = [op for op in p.epilogue if op in ("bn", "add")]
    if refused or list(p.epilogue).count("bias") > 1 or list(p.epilogue).count("scale") > 1:
        raise UnsupportedProblem(f"KernelBench's level-2 export takes activations, bn_train and at most one bias and "
                                 f"one scale after the convolution, not {', '.join(refused) or 'two biases or scales'} "
                                 "(bn: KernelBench runs its Models in training mode, where a batch norm normalises by "
                                 "the batch's statistics: bn_train)")
    return tuple(p.epilogue)


TORCH_OPS = {"relu": "torch.relu(x)", "relu6": "torch.nn.functional.relu6(x)", "silu": "torch.nn.functional.silu(x)",
             "gelu": "torch.nn.functional.gelu(x)", "hardswish": "torch.nn.functional.hardswish(x)",
             "leaky_relu": "torch.nn.functional.leaky_relu(x, 0.01)", "bias": "x + self.bias",
             "bn_train": "self.bn(x)", "scale": "x * self.scaling_factor"}
# each vector op's rows (scale, shift) from the level-2 Model's parameters
ROWS_FROM_MODEL = {"bias": (None, "self.bias.detach().reshape(-1)"),
                   "bn_train": ("self.bn.weight.detach()", "self.bn.bias.detach()"),
                   "scale": ("self.scaling_factor", None)}
PARAMS_OF = {"bias": ("self.bias",), "bn_train": ("self.bn.weight", "self.bn.bias"), "scale": ()}

RUNNING = """\
        bn = self.bn  # its running statistics move as BatchNorm2d's do in training
        bn.num_batches_tracked.add_(1)
        momentum = bn.momentum if bn.momentum is not None else 1.0 / float(bn.num_batches_tracked)
"""


def chain_in_torch(p: Any, indent: str) -> str:
    """The level-2 chain as torch statements on `x` (the Model's forward after its convolution)."""
    return "".join(f"{indent}x = {TORCH_OPS[op]}\n" for op in level2_chain(p))


def launch_with_vectors(p: Any) -> str:
    """The end of ModelNew's forward: conv2d_triton on the packed weight, with the level-2 chain's per-channel rows
    where it has vector ops (made from the Model's parameters again only when one of them changes); with bn_train,
    the batch norm's running statistics, which the call moves as BatchNorm2d does, and its count of batches."""
    chain = level2_chain(p) if p.epilogue else ()
    ops = [(i, op) for i, op in enumerate(chain) if op in ROWS_FROM_MODEL]
    if not ops:
        return "        return conv2d_triton(x, w, self.conv1.bias, self._packed)\n"
    params = [t for _, op in ops for t in PARAMS_OF[op]]
    rows = "".join(f"            v[{2 * i + j}] = {expr}\n" for i, op in ops
                   for j, expr in enumerate(ROWS_FROM_MODEL[op]) if expr is not None)
    running = ", (bn.running_mean, bn.running_var, momentum)" if "bn_train" in chain else ""
    return (f"        key = ({''.join(f'({t}.data_ptr(), {t}._version), ' for t in params)}x.dtype)\n"
            "        if self._vectors_for != key:  # the epilogue's rows, made again when a parameter changes\n"
            f"            v = torch.zeros(({2 * len(chain)}, {p.out_channels}), device=x.device, dtype=x.dtype)\n"
            f"{rows}            self._vectors, self._vectors_for = v, key\n"
            + (RUNNING if running else "")
            + f"        return conv2d_triton(x, w, self.conv1.bias, self._packed, self._vectors{running})\n")


def model_new(p: Any, forward_body: str) -> str:
    """ModelNew: the reference Model's nn.Conv2d, made first (so that it draws the same parameters after the same
    seed), and the forward body given. A problem with an epilogue is KernelBench's level 2 (level2_chain): the
    convolution is `conv` there, then the chain's parameter, and off the GPU the chain runs in torch."""
    if p.epilogue:
        return _model_new_level2(p, forward_body.replace("self.conv1", "self.conv"))
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


def _model_new_level2(p: Any, forward_body: str) -> str:
    chain = level2_chain(p)
    bias = (f"\n        self.bias = nn.Parameter(torch.randn(({p.out_channels}, 1, 1)))" if "bias" in chain else "")
    if "bn_train" in chain:
        bias += f"\n        self.bn = nn.BatchNorm2d({p.out_channels})"
    if "scale" in chain:
        bias += "\n        self.scaling_factor = init_inputs[-1]"
    torch_when = "not x.is_cuda or not self.training" if "bn_train" in chain else "not x.is_cuda"
    return f'''

class ModelNew(nn.Module):
    def __init__(self, *init_inputs):  # the problem's sizes are baked in
        super(ModelNew, self).__init__()
        self.conv = nn.Conv2d(in_channels={p.in_channels}, out_channels={p.out_channels}, kernel_size=({p.kernel_h}, {p.kernel_w}),
                              stride={tuple(p.stride)}, padding={tuple(p.padding)}, dilation={tuple(p.dilation)}, bias={p.bias}){bias}
        self._packed, self._packed_for = None, None
        self._vectors, self._vectors_for = None, None

    def forward(self, x):
        if {torch_when}:{"  # in eval a batch norm reads its running statistics: torch's ops" if "bn_train" in chain else ""}
            x = self.conv(x)
{chain_in_torch(p, "            ")}            return x
{forward_body}'''
