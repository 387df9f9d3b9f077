"""The epilogue a kernel fuses: what follows the convolution and its own bias (convtune.problem.EPILOGUE_OPS), applied
in order to the float32 sums in registers, before the one rounding to the output's dtype and the one store.

- `Epilogue` holds a chain and its tensors: one (scale, shift) pair of per-channel vectors per op (bn and bn_train use
  both, bias the shift, the rest none; scale is a bn whose shift row pack_vectors leaves zero) and the residual of
  `add`, in the output's shape.
- `apply_epilogue` is the jit function a kernel calls on its accumulator tile. The chain reaches it as one constexpr
  (`code`: 4 bits an op), so each chain compiles its own binary and a call without one compiles no epilogue. In 16
  bits it rounds each step's result as torch does, so that it matches torch's chain by KernelBench's allclose. `scale`
  is a bn whose shift is zero, and `bn_train` reaches it as a bn whose rows the statistics pass computed
  (kernels/batch_stats.py), so both run bn's branch.
- `torch_chain` is the same chain run by torch, op after op, for the judge (at the output's dtype, rounding after each
  op as torch does) and for the float64 reference.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch
import torch.nn.functional as F
import triton
import triton.language as tl

from convtune.errors import UnsupportedProblem
from convtune.problem import ACTIVATIONS, BN_EPS, LEAKY_RELU_SLOPE, VECTOR_OPS, parse_epilogue

# op → its 4-bit code in `code(chain)`; 0 ends the chain. The numbers are apply_epilogue's branches: scale and bn_train
# run bn's (x·scale + shift, with a zero shift or the batch's rows)
CODES = {op: i + 1 for i, op in enumerate(("bias", "bn") + ACTIVATIONS + ("add",))}
CODES.update(scale=CODES["bn"], bn_train=CODES["bn"])
# each activation as torch computes it, at its defaults (gelu exact)
TORCH_ACTIVATIONS = {"relu": F.relu, "relu6": F.relu6, "silu": F.silu, "gelu": F.gelu, "hardswish": F.hardswish,
                     "leaky_relu": lambda y: F.leaky_relu(y, LEAKY_RELU_SLOPE)}


def code(chain: tuple[str, ...]) -> int:
    """The chain as the kernels' EPILOGUE constexpr: op i's code in bits 4i..4i+3 (0: no epilogue)."""
    return sum(CODES[op] << (4 * i) for i, op in enumerate(chain))


@dataclass(frozen=True)
class Epilogue:
    """A chain and its tensors. `vectors`: [2·len(chain), C_out], op i's scale in row 2i and shift in row 2i+1 (rows an
    op does not use are ignored), contiguous, in any float dtype (a kernel reads them as float32); `residual`: the
    tensor `add` adds, the output's shape and dtype (None without `add`)."""

    chain: tuple[str, ...]
    vectors: Optional[torch.Tensor] = None
    residual: Optional[torch.Tensor] = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "chain", parse_epilogue(self.chain, "epilogue"))
        if ("add" in self.chain) != (self.residual is not None):
            raise UnsupportedProblem("an epilogue has a residual tensor exactly when its chain has `add`")
        if any(op in VECTOR_OPS for op in self.chain) and self.vectors is None:
            raise UnsupportedProblem(f"epilogue {','.join(self.chain)}: its {'/'.join(VECTOR_OPS)} ops need `vectors`")

    @property
    def code(self) -> int:
        return code(self.chain)

    def to(self, device: str) -> "Epilogue":
        return Epilogue(self.chain, None if self.vectors is None else self.vectors.to(device),
                        None if self.residual is None else self.residual.to(device))

    def check(self, out_shape: tuple[int, ...], dtype: torch.dtype, device: torch.device) -> None:
        """UnsupportedProblem in one line where the tensors do not fit a call writing `out_shape` in `dtype`."""
        if self.vectors is not None:
            want = (2 * len(self.chain), out_shape[1])
            if tuple(self.vectors.shape) != want or not self.vectors.is_contiguous() or \
                    not self.vectors.is_floating_point() or self.vectors.device != device:
                raise UnsupportedProblem(f"epilogue vectors must be a contiguous float {want} tensor on {device}, got "
                                         f"{tuple(self.vectors.shape)} {self.vectors.dtype} on {self.vectors.device}")
        if self.residual is not None and (tuple(self.residual.shape) != tuple(out_shape)
                                          or self.residual.dtype != dtype or self.residual.device != device):
            raise UnsupportedProblem(f"the residual must be a {tuple(out_shape)} {dtype} tensor on {device}, got "
                                     f"{tuple(self.residual.shape)} {self.residual.dtype} on {self.residual.device}")

    def residual_as(self, out_channels_last: bool) -> torch.Tensor:
        """The residual (there is one) in the output's memory layout, as the kernel reads it at the output's offsets (a
        copy where it is not: inside the call, so inside any timing of it)."""
        fmt = torch.channels_last if out_channels_last else torch.contiguous_format
        r: torch.Tensor = self.residual  # type: ignore[assignment]
        return r if r.is_contiguous(memory_format=fmt) else r.contiguous(memory_format=fmt)


NO_EPILOGUE = Epilogue(())


def as_kwargs(ep: Epilogue) -> dict:
    """A launch's keyword for `ep`: none without a chain, so a call of the convolution alone is the same call to
    every variant (one whose launch takes no epilogue too)."""
    return {"epilogue": ep} if ep.chain else {}


def pack_vectors(chain: tuple[str, ...], params: list[tuple[Optional[torch.Tensor], Optional[torch.Tensor]]]
                 ) -> Optional[torch.Tensor]:
    """`Epilogue.vectors` from one (scale, shift) pair per op (None where the op uses none), or None where no op uses
    one."""
    if not any(op in VECTOR_OPS for op in chain):
        return None
    c_out, like = next((t.shape[0], t) for pair in params for t in pair if t is not None)
    rows = like.new_zeros((2 * len(chain), c_out))
    for i, (scale, shift) in enumerate(params):
        if scale is not None:
            rows[2 * i] = scale
        if shift is not None:
            rows[2 * i + 1] = shift
    return rows


def torch_chain(y: torch.Tensor, ep: Epilogue, dtype: Optional[torch.dtype] = None) -> torch.Tensor:
    """The chain run by torch on a convolution's output `y`, op after op, in `dtype` (default: y's): the reference a
    fused kernel is judged against (at the output's dtype) and the float64 one. Each op computes in float32 (float64
    for a float64 chain) from the epilogue's tensors as they are, and rounds its result to `dtype` once, as torch's
    elementwise kernels and its batch norm do for 16-bit tensors. `bn_train` normalizes by the statistics of `y` as
    given (the batch's), with torch's batch norm in training mode."""
    dtype = dtype or y.dtype
    work = torch.float64 if dtype == torch.float64 else torch.float32
    y = y.to(dtype)
    for i, op in enumerate(ep.chain):
        z = y.to(work)
        if op == "bn_train":
            z = F.batch_norm(z, None, None, ep.vectors[2 * i].to(work), ep.vectors[2 * i + 1].to(work),  # type: ignore[index]
                             training=True, eps=BN_EPS)
        elif op in VECTOR_OPS:
            scale, shift = (ep.vectors[2 * i].to(work).view(1, -1, 1, 1),  # type: ignore[index]
                            ep.vectors[2 * i + 1].to(work).view(1, -1, 1, 1))  # type: ignore[index]
            z = z + shift if op == "bias" else z * scale + shift  # scale: its shift row is zero (pack_vectors)
        elif op == "add":
            z = z + ep.residual.to(work)  # type: ignore[union-attr]
        else:
            z = TORCH_ACTIVATIONS[op](z)
        y = z.to(dtype)
    return y


@triton.jit
def _apply_op(acc, e_ptr, r_ptr, offs_n, n_mask, y_offs, y_mask, C_OUT: tl.constexpr, OP: tl.constexpr,
              I: tl.constexpr, OUT_DTYPE: tl.constexpr):
    """Op I of a chain, whose code (CODES) is OP, applied to `acc`; its vectors are rows 2I and 2I+1 at e_ptr. Its
    result is rounded to a 16-bit OUT_DTYPE, as torch rounds each op's (torch_chain)."""
    if OP == 1:  # bias
        acc += tl.load(e_ptr + (2 * I + 1) * C_OUT + offs_n, mask=n_mask, other=0.0).to(tl.float32)[None, :]
    elif OP == 2:  # bn: scale and shift
        scale = tl.load(e_ptr + (2 * I) * C_OUT + offs_n, mask=n_mask, other=0.0).to(tl.float32)
        shift = tl.load(e_ptr + (2 * I + 1) * C_OUT + offs_n, mask=n_mask, other=0.0).to(tl.float32)
        acc = acc * scale[None, :] + shift[None, :]
    elif OP == 3:  # relu
        acc = tl.maximum(acc, 0.0)
    elif OP == 4:  # relu6
        acc = tl.minimum(tl.maximum(acc, 0.0), 6.0)
    elif OP == 5:  # silu
        acc = acc * tl.sigmoid(acc)
    elif OP == 6:  # gelu, exact (torch's default)
        acc = 0.5 * acc * (1.0 + tl.math.erf(acc * 0.7071067811865476))
    elif OP == 7:  # hardswish
        acc = acc * (tl.minimum(tl.maximum(acc + 3.0, 0.0), 6.0) / 6.0)
    elif OP == 8:  # leaky_relu, slope LEAKY_RELU_SLOPE
        acc = tl.where(acc > 0.0, acc, acc * 0.01)
    elif OP == 9:  # add
        acc += tl.load(r_ptr + y_offs, mask=y_mask, other=0.0).to(tl.float32)
    if OP != 0:
        if OUT_DTYPE != tl.float32:
            acc = acc.to(OUT_DTYPE).to(tl.float32)
    return acc


@triton.jit
def apply_epilogue(acc, e_ptr, r_ptr, offs_n, n_mask, y_offs, y_mask, C_OUT: tl.constexpr, EPILOGUE: tl.constexpr,
                   OUT_DTYPE: tl.constexpr):
    """`acc` (float32, [BLOCK_M, BLOCK_N]: the convolution and its bias) with the chain EPILOGUE (code()) applied:
    channel `offs_n` of each column, the residual read at `r_ptr + y_offs` (the output's offsets) under `y_mask`. For a
    16-bit output (OUT_DTYPE) each step's result is rounded to it, the convolution's first, as torch's chain rounds
    them: a fused bfloat16 output rounded once was two units in the last place from torch's in 4 of 80 random cases on
    the H200, outside KernelBench's allclose."""
    if OUT_DTYPE != tl.float32:
        acc = acc.to(OUT_DTYPE).to(tl.float32)
    for i in tl.static_range(6):  # MAX_EPILOGUE_OPS
        acc = _apply_op(acc, e_ptr, r_ptr, offs_n, n_mask, y_offs, y_mask, C_OUT, (EPILOGUE >> (4 * i)) & 15, i,
                        OUT_DTYPE)
    return acc
