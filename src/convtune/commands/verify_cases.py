"""verify's cases: a random convolution (shape, padding, stride, dilation, bias, layout, input offset, launch
configuration) drawn for a variant and precision, its tensors, and the cases of an earlier --out file.

A variant restricted to a family of shapes draws its cases from that family itself (KernelVariant.draw_case, in its
module); the others take the general draw for what they read (any_layout, dilation_one).
"""

from __future__ import annotations

import json
import math
import random
from dataclasses import dataclass
from typing import Any, Optional

from convtune.problem import FLOAT32_ONLY_OPS

# The float32 precision a chain with bn_train is drawn at: the first the variant runs. At tf32 the batch norm turns each
# TF32 rounding (ours and cuDNN's, which differ) into γ/σ times it, so two TF32 chains miss each other by allclose
# where neither is wrong: on the H200 one such case had ours 3.6e-5 and cuDNN 1.7e-4 from the exact chain of the
# rounded operands (the 16-bit dtypes: problem.FLOAT32_ONLY_OPS)
BN_TRAIN_PRECISIONS = ("tf32x3", "ieee")
MAX_ELEMENTS = 2**24  # per tensor: keeps a case's float64 reference small and quick
# ok; wrong (against float64, confirmed on the CPU); torch_mismatch (right, but not torch's own result by
# KernelBench's allclose); cudnn_ran_fp32 (a tf32 output next to torch's true-fp32 result: nothing to match);
# cudnn_rounds_otherwise (tf32: ours is the exact result of the operands rounded to nearest TF32, cuDNN's
# rounding rule, and torch's is not: cuDNN ran an algorithm that rounds otherwise for that shape; a 16-bit epilogue:
# ours matches torch's chain on the exactly rounded convolution and torch's does not);
# bad_reference (the GPU's float64 reference disagreed with the CPU's, and the output agreed with the CPU's);
# error (the launch raised); skipped (out of resources: the configuration does not fit this GPU)
OUTCOMES = ("ok", "wrong", "torch_mismatch", "cudnn_ran_fp32", "cudnn_rounds_otherwise", "bad_reference", "error",
            "skipped")


@dataclass
class Case:
    index: int
    variant: str
    precision: str
    n: int
    c: int
    h: int
    w: int
    k: int
    kh: int
    kw: int
    stride: tuple[int, int]
    padding: tuple[int, int]
    dilation: tuple[int, int]
    bias: bool
    offset: int  # elements between the storage's start and the input's first element (unaligned if odd)
    init: str  # rand (KernelBench) or randn
    meta: Optional[dict[str, int]]  # None: the variant's default for the problem's class
    seed: int
    layout: str = "nchw"  # the input's and the output's: nchw or channels_last
    dtype: str = "float32"  # the tensors' (a bfloat16 or float16 case runs at precision tf32: problem.for_dtype)
    epilogue: tuple[str, ...] = ()  # what the kernel fuses after the convolution (convtune.problem.EPILOGUE_OPS)

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> "Case":
        """The case of one --out line (lists back to tuples; files from before `layout` lack it: NCHW)."""
        return cls(**{k: tuple(row[k]) if isinstance(row[k], list) else row[k]
                      for k in cls.__dataclass_fields__ if k in row})

    def label(self) -> str:
        meta = "default" if self.meta is None else "M{BLOCK_M}-N{BLOCK_N}-K{BLOCK_K}-w{num_warps}-s{num_stages}".format(**self.meta)
        return (f"{self.variant}/{self.precision} n={self.n} c={self.c} h={self.h} w={self.w} k={self.k} "
                f"r={self.kh}x{self.kw} s={self.stride[0]}x{self.stride[1]} p={self.padding[0]}x{self.padding[1]} "
                f"d={self.dilation[0]}x{self.dilation[1]} bias={int(self.bias)} offset={self.offset} init={self.init} "
                f"meta={meta}" + (f" layout={self.layout}" if self.layout != "nchw" else "")
                + (f" dtype={self.dtype}" if self.dtype != "float32" else "")
                + (f" epilogue={','.join(self.epilogue)}" if self.epilogue else ""))


def _out(size: int, k: int, s: int, p: int, d: int) -> int:
    return (size + 2 * p - d * (k - 1) - 1) // s + 1


def draw_case(rng: random.Random, index: int, variant: str, precision: str, small: bool) -> Case:
    """One random case of `variant`: its own draw where it declares one (a restricted variant), else the general
    draw for what it reads (any layout, dilation); `small` keeps it cheap enough for the interpreter."""
    from convtune.kernels import get_variant

    declared = get_variant(variant)
    if declared.draw_case is not None:
        return Case(index, variant, precision, **declared.draw_case(rng, small))
    return general_case(rng, index, variant, precision, small, declared.any_layout, declared.dilation_one)


def general_case(rng: random.Random, index: int, variant: str, precision: str, small: bool, any_layout: bool = True,
                 dilation_one: bool = False) -> Case:
    """Any convolution the common checks allow (kernel 1-11, stride 1-5, padding wider than the kernel, dilation 1-3
    unless `dilation_one`, either layout where `any_layout`), with a random configuration or the default."""
    from convtune.kernels.base import log_uniform_int

    while True:
        kh, kw = (rng.randint(1, 5), rng.randint(1, 5)) if small else (rng.choice([1, 2, 3, 3, 4, 5, 7, 11]), rng.choice([1, 2, 3, 3, 4, 5, 7, 11]))
        dh, dw = (rng.choice([1, 1, 1, 2, 3]) for _ in range(2))
        if dilation_one:  # drawn all the same, so that the other variants' cases stay what they were
            dh, dw = 1, 1
        sh, sw = rng.randint(1, 3 if small else 5), rng.randint(1, 3 if small else 5)
        ph, pw = rng.randint(0, dh * (kh - 1) + 2), rng.randint(0, dw * (kw - 1) + 2)  # up to wider than the kernel
        c = rng.randint(1, 4) if small else log_uniform_int(rng, 1, 64)
        k = rng.choice([rng.randint(1, 20), rng.randint(17, 40)]) if small else log_uniform_int(rng, 1, 1024)
        n = rng.randint(1, 2) if small else rng.choice([1, 1, 2, 3, 4, 8, 16])
        lo_h, lo_w = max(1, dh * (kh - 1) + 1 - 2 * ph), max(1, dw * (kw - 1) + 1 - 2 * pw)
        h, w = rng.randint(lo_h, lo_h + (12 if small else 80)), rng.randint(lo_w, lo_w + (12 if small else 80))
        oh, ow = _out(h, kh, sh, ph, dh), _out(w, kw, sw, pw, dw)
        if oh < 1 or ow < 1 or c * kh * kw > 1024:  # 1024: the seed kernel unrolls K, keep its compile short
            continue
        if max(n * c * h * w, n * k * oh * ow) > (2**14 if small else MAX_ELEMENTS):
            continue
        break
    meta = None if rng.random() < 0.3 else _draw_meta(rng, small)
    case = Case(index, variant, precision, n, c, h, w, k, kh, kw, (sh, sw), (ph, pw), (dh, dw), rng.random() < 0.7,
                rng.choice([0, 0, 1, 2, 3]), rng.choice(["rand", "randn"]), meta, rng.randrange(2**31))
    if any_layout:  # drawn last: the other fields are what they were before layouts were drawn
        case.layout = rng.choice(["nchw", "channels_last"])
    return case


def _draw_meta(rng: random.Random, small: bool) -> dict[str, int]:
    while True:
        m = dict(BLOCK_M=rng.choice([16, 32] if small else [32, 64, 128, 256]),
                 BLOCK_N=rng.choice([16, 32] if small else [16, 32, 64, 128]),
                 BLOCK_K=rng.choice([16, 32] if small else [16, 32, 64]),
                 num_warps=rng.choice([2, 4] if small else [2, 4, 8]), num_stages=rng.choice([1, 2, 3, 4]))
        if (m["BLOCK_M"] + m["BLOCK_N"]) * m["BLOCK_K"] * 4 * m["num_stages"] <= 160 * 1024:  # fits shared memory
            return m


def case_tensors(case: Case, dev: Any) -> tuple[Any, Any, Any, Any]:
    """(problem, x, weight, bias) of a case on `dev`: the same tensors every time for the same case."""
    import torch

    from convtune.problem import ConvProblem

    g = torch.Generator(device=dev).manual_seed(case.seed)
    p = ConvProblem("verify", case.n, case.c, case.h, case.w, case.k, case.kh, case.kw, case.stride, case.padding,
                    case.dilation, 1, case.bias, dtype=case.dtype, layout=case.layout, epilogue=tuple(case.epilogue))
    dtype = getattr(torch, case.dtype)  # float32, bfloat16 or float16, as torch names them
    draw = torch.rand if case.init == "rand" else torch.randn
    storage = draw(case.offset + case.n * case.c * case.h * case.w, generator=g, device=dev).to(dtype)
    if case.layout == "channels_last":
        x = storage[case.offset:].view(case.n, case.h, case.w, case.c).permute(0, 3, 1, 2)
    else:
        x = storage[case.offset:].view(case.n, case.c, case.h, case.w)
    bound = 1 / math.sqrt(case.c * case.kh * case.kw)  # torch.nn.Conv2d's initialisation
    w = ((torch.rand(case.k, case.c, case.kh, case.kw, generator=g, device=dev) * 2 - 1) * bound).to(dtype)
    b = ((torch.rand(case.k, generator=g, device=dev) * 2 - 1) * bound).to(dtype) if case.bias else None
    return p, x, w, b


def read_cases(path: str, outcomes: Optional[tuple[str, ...]] = None) -> list[Case]:
    """The cases of an --out file (those whose outcome is in `outcomes`, if given); incomplete lines skipped."""
    cases = []
    with open(path) as f:
        for line in f:
            try:
                r = json.loads(line)
            except json.JSONDecodeError:
                continue
            if outcomes is None or r.get("outcome") in outcomes:
                cases.append(Case.from_row(r))
    return cases


def draw_chain(rng: random.Random, ops: tuple[str, ...]) -> tuple[str, ...]:
    """A random epilogue of 1 to 4 ops taken from `ops` (a variant's epilogues), at most one of them `add`, and
    `bn_train` (where the variant fuses it) first in half of them (it comes first only: problem.parse_epilogue)."""
    chain: list[str] = ["bn_train"] if "bn_train" in ops and rng.random() < 0.5 else []
    for _ in range(rng.randint(1, 4) - len(chain)):
        chain.append(rng.choice([op for op in ops if op != "bn_train" and (op != "add" or "add" not in chain)]))
    return tuple(chain)


def make_cases(variants: list[str], precisions: list[str], shapes: int, seed: int, small: bool,
               dtypes: tuple[str, ...] = ("float32",), fused: int = 0) -> list[Case]:
    """`shapes` cases per variant and float32 precision it runs (KernelVariant.precisions), and per 16-bit dtype of
    `dtypes` it takes (KernelVariant.dtypes; at precision tf32, what a 16-bit problem records); and for a variant that
    fuses epilogues, `fused` more per dtype, each with a random chain of them (draw_chain) at precision tf32, or with
    bn_train at the first of BN_TRAIN_PRECISIONS the variant runs (none: no bn_train)."""
    from convtune.kernels import VARIANTS

    cases = []
    for v in variants:
        ops = VARIANTS[v].epilogues or ()
        for dtype in (d for d in dtypes if ops and fused and VARIANTS[v].takes_dtype(d)):
            if not VARIANTS[v].runs_precision("tf32"):
                continue
            rng = random.Random(f"{seed}/{v}/{dtype}/epilogue")
            for i in range(fused):
                case = draw_case(rng, shapes + i, v, "tf32", small)
                full = next((p for p in BN_TRAIN_PRECISIONS if VARIANTS[v].runs_precision(p)), None)
                judgeable = tuple(op for op in ops if op not in FLOAT32_ONLY_OPS or (dtype == "float32" and full))
                case.dtype, case.epilogue = dtype, draw_chain(rng, judgeable)
                if any(op in FLOAT32_ONLY_OPS for op in case.epilogue):
                    case.precision = full
                cases.append(case)
    for v in variants:
        for prec in (p for p in precisions if VARIANTS[v].runs_precision(p) and "float32" in dtypes):
            rng = random.Random(f"{seed}/{v}/{prec}")
            cases += [draw_case(rng, i, v, prec, small) for i in range(shapes)]
        for dtype in (d for d in dtypes if d != "float32" and VARIANTS[v].takes_dtype(d)):
            if not VARIANTS[v].runs_precision("tf32"):
                continue
            rng = random.Random(f"{seed}/{v}/{dtype}")
            for i in range(shapes):
                case = draw_case(rng, i, v, "tf32", small)
                case.dtype = dtype
                cases.append(case)
    return cases


def draw_first_use(rng: random.Random, index: int) -> Case:
    """A library call for --first-use: half any convolution (the general draw), half a CNN-like 3x3 or 1x1
    layer at a realistic size (where a kernel can beat torch, so that the kept-kernel path runs too); either layout."""
    if rng.random() < 0.5:
        case = general_case(rng, index, "library", "tf32", small=False)
    else:
        kh = rng.choice([1, 3])
        c, k, hw = rng.choice([32, 64, 128, 256]), rng.choice([64, 128, 256]), rng.choice([14, 28, 56])
        case = Case(index, "library", "tf32", rng.choice([8, 16, 32]), c, hw, hw, k, kh, kh, (1, 1), (kh // 2,) * 2,
                    (1, 1), rng.random() < 0.5, 0, "rand", None, rng.randrange(2**31))
    case.variant, case.meta = "library", None
    case.layout = rng.choice(["nchw", "channels_last"])
    return case
