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
    and then each op, as #1 Conv2D_ReLU_BiasAdd), or UnsupportedProblem: activations, and at most one `bias`, the
    Model's nn.Parameter of shape (C_out, 1, 1) drawn with torch.randn after the convolution's parameters. `bn` is
    refused (KernelBench runs its Models in training mode, where a batch norm normalises by the batch's statistics,
    which no epilogue computes), and so is `add` (a second input)."""
    from convtune.errors import UnsupportedProblem

    refused = [op for op in p.epilogue if op in ("bn", "add")]
    if refused or list(p.epilogue).count("bias") > 1:
        raise UnsupportedProblem(f"KernelBench's level-2 export takes activations and at most one bias after the "
                                 f"convolution, not {', '.join(refused) or 'two biases'} (bn: KernelBench runs its "
                                 "Models in training mode, where a batch norm normalises by the batch's statistics)")
    return tuple(p.epilogue)


TORCH_OPS = {"relu": "torch.relu(x)", "relu6": "torch.nn.functional.relu6(x)", "silu": "torch.nn.functional.silu(x)",
             "gelu": "torch.nn.functional.gelu(x)", "hardswish": "torch.nn.functional.hardswish(x)",
             "leaky_relu": "torch.nn.functional.leaky_relu(x, 0.01)", "bias": "x + self.bias"}


def chain_in_torch(p: Any, indent: str) -> str:
    """The level-2 chain as torch statements on `x` (the Model's forward after its convolution)."""
    return "".join(f"{indent}x = {TORCH_OPS[op]}\n" for op in level2_chain(p))


def launch_with_vectors(p: Any) -> str:
    """The end of ModelNew's forward: conv2d_triton on the packed weight, with the level-2 chain's per-channel rows
    where it has a `bias` (the Model's parameter, copied into its op's shift row again only when it changes)."""
    chain = level2_chain(p) if p.epilogue else ()
    if "bias" not in chain:
        return "        return conv2d_triton(x, w, self.conv1.bias, self._packed)\n"
    return f'''\
        bias = self.bias.detach().reshape(-1)
        if self._vectors_for != (bias.data_ptr(), self.bias._version, x.dtype):  # the bias op's row of the epilogue
            self._vectors = torch.zeros(({2 * len(chain)}, bias.numel()), device=x.device, dtype=x.dtype)
            self._vectors[{2 * chain.index("bias") + 1}] = bias
            self._vectors_for = (bias.data_ptr(), self.bias._version, x.dtype)
        return conv2d_triton(x, w, self.conv1.bias, self._packed, self._vectors)
'''

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
    bias = (f"\n        self.bias = nn.Parameter(torch.randn(({p.out_channels}, 1, 1)))" if "bias" in level2_chain(p)
            else "")
    return f'''

class ModelNew(nn.Module):
    def __init__(self, *init_inputs):  # the problem's sizes are baked in
        super(ModelNew, self).__init__()
        self.conv = nn.Conv2d(in_channels={p.in_channels}, out_channels={p.out_channels}, kernel_size=({p.kernel_h}, {p.kernel_w}),
                              stride={tuple(p.stride)}, padding={tuple(p.padding)}, dilation={tuple(p.dilation)}, bias={p.bias}){bias}
        self._packed, self._packed_for = None, None
        self._vectors, self._vectors_for = None, None

    def forward(self, x):
        if not x.is_cuda:
            x = self.conv(x)
{chain_in_torch(p, "            ")}            return x
{forward_body}'''
