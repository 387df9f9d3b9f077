"""KernelBench's one-file export of the channels_last GEMMs (`python promote.py export=kernelbench`): what the nhwc
variants' files share. The input is copied to channels_last by layout's kernel (rounded to
nearest TF32 there where the kernel takes it rounded), the weight packed as [C_out, KH·KW·C_in] with its TMA
descriptor, the output written in the problem's layout with the level-2 chain fused (bn_train in two passes,
kernels/batch_stats.py); each variant gives its kernel
and its launch (`conv2d_triton`). Pure text, as kernels/export_format.py; `p` is a convtune.problem.ConvProblem.
"""

from __future__ import annotations

from typing import Any, Optional

from convtune.kernels import batch_stats, layout
from convtune.kernels import precision as prec
from convtune.kernels.epilogue import code
from convtune.kernels.export_format import (IMPORTS, chain_in_torch, epilogue_source, launch_with_vectors,
                                            level2_chain, model_new, pinned_block, source_of)
from convtune.kernels.meta import safe_stages
from convtune.kernels.nhwc_tiles import GROUP_M, tma_fits


def render(p: Any, m: dict, precision: str, provenance: str, kernel: Any, launch: str, input_rounded: bool,
           capability: tuple[int, int], k_steps: Optional[int] = None, helpers: tuple = ()) -> str:
    """The file: `kernel` (a jit function) launched by `launch` (the source of conv2d_triton(x, weight, bias,
    packed=None, vectors=None), which reads the names the header defines). `input_rounded`: the kernel takes its
    input rounded to nearest TF32 where the precision rounds; `capability`: the compute capability the variant
    declares (KernelVariant.compute_capability), below which the file runs the Model's own ops; `k_steps`: the K
    loop's steps where they are not taps × channel blocks (the pipeline's stages are no more); `helpers`: the jit
    functions `kernel` calls besides the shared ones (rounding, epilogue, statistics)."""
    chain = level2_chain(p) if p.epilogue else ()
    rounds = prec.rounds_operands(prec.kernel_precision(precision, p.dtype))
    k_steps = k_steps or p.kernel_h * p.kernel_w * -(-p.in_channels // m["BLOCK_K"])
    w_tma = tma_fits(p.in_channels, 4 if p.dtype == "float32" else 2)
    fallback = ("            x = self.conv1(x)\n" + chain_in_torch(p, "            ") + "            return x\n" if chain
                else "            return self.conv1(x)\n")
    fallback = f"        if torch.cuda.get_device_capability(x.device) < {tuple(capability)}:\n{fallback}"
    header = pinned_block(m, precision, provenance, p) + f'''\
EPILOGUE = {code(chain)}  # {', '.join(chain) or 'none'}: apply_epilogue's ops, 4 bits each
BN_TRAIN = {chain[:1] == ("bn_train",)}  # a statistics pass first, then the batch's rows (bn_rows) as a bn's
# the input rounded to nearest TF32 as it is copied to channels_last (the kernel then takes its tiles as they are),
# or in the kernel; the weight's tiles through a TMA descriptor where its rows allow one; tiles in groups of {GROUP_M}
INPUT_ROUNDED = {rounds and input_rounded}
W_TMA, GROUP, STAGES = {w_tma}, {GROUP_M}, {safe_stages(m["num_stages"], k_steps)}
OUT_CL = {p.layout == "channels_last"}  # the output in the problem's layout
# launch keys (shapes, dtype, device, 16-byte alignments) → the checked binary's launcher: after the first call a
# launch skips Triton's per-call dispatch (44.9 us of one launch's host time on the H200)
_launches = {{}}


def round_even(t):
    """To nearest TF32, ties to even (cvt.rn's rule, as cuDNN rounds at stride 1)."""
    bits = t.view(torch.int32)
    return ((bits + (TF32_HALF_ULP - 1) + ((bits >> 13) & 1)) & TF32_MASK).view(torch.float32)


def pack_weight(weight):
    """[C_out, C_in, KH, KW] → [C_out, KH·KW·C_in] (K ordered tap by tap, channels innermost, 16-byte aligned),
    rounded to nearest TF32 where the precision rounds; with its TMA descriptor where W_TMA."""
    w = weight.permute(0, 2, 3, 1).contiguous().reshape(weight.shape[0], -1)
    w = round_even(w) if ROUND else w
    w = w.clone() if w.data_ptr() % 16 else w
    return w, (TensorDescriptor.from_tensor(w, [BLOCK_N, BLOCK_K]) if W_TMA else w)


def to_channels_last(x):
    """x channels_last-contiguous and 16-byte aligned, rounded to nearest TF32 where INPUT_ROUNDED: layout's tiled
    copy for an NCHW input with {layout.MIN_CHANNELS} channels or more, torch's otherwise."""
    n, c, h, w = x.shape
    if x.dtype not in (torch.float32, torch.bfloat16, torch.float16) or c < {layout.MIN_CHANNELS} or \\
            not x.is_contiguous() or x.is_contiguous(memory_format=torch.channels_last):
        y = x.contiguous(memory_format=torch.channels_last)
        y = round_even(y) if INPUT_ROUNDED else y
        return y if y.data_ptr() % 16 == 0 else y.clone(memory_format=torch.channels_last)
    y = torch.empty_like(x, memory_format=torch.channels_last)
    tiles_p = triton.cdiv(h * w, {layout.BLOCK_P})
    _nchw_to_nhwc_kernel[(n * tiles_p, triton.cdiv(c, {layout.BLOCK_C}))](
        x, y, c, h * w, tiles_p, BLOCK_C={layout.BLOCK_C}, BLOCK_P={layout.BLOCK_P}, ROUND=INPUT_ROUNDED,
        num_warps={layout.NUM_WARPS})
    return y
'''
    forward = f'''\
{fallback}        w = self.conv1.weight
        key = (w.data_ptr(), w._version)  # reorder and round the weight again only when it changes
        if self._packed_for != key:
            self._packed, self._packed_for = pack_weight(w.detach()), key
''' + launch_with_vectors(p)
    rounding = (f"TF32_HALF_ULP, TF32_MASK = {prec.TF32_HALF_ULP:#x}, {prec.TF32_MASK}\n\n\n"
                + source_of(prec.round_tf32_even_bits, prec.round_tf32_even_ptx)
                + "\n\n\n# the PTX instruction where Triton compiles, the integer twin where it interprets (no inline "
                + "assembly there)\nround_tf32_even = (round_tf32_even_bits if type(round_tf32_even_bits).__name__ == "
                + "\"InterpretedFunction\"\n                   else round_tf32_even_ptx)\n")
    imports = IMPORTS + "from triton.tools.tensor_descriptor import TensorDescriptor\n"
    stats = source_of(batch_stats.add_batch_stats, batch_stats._bn_rows_kernel, batch_stats.bn_rows)
    return ("\n\n".join((imports, rounding, epilogue_source(), stats, source_of(layout._nchw_to_nhwc_kernel),
                         source_of(*helpers, kernel))) + "\n" + header + "\n\n" + launch.strip("\n") + "\n"
            + model_new(p, forward))
