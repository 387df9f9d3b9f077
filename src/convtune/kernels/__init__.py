"""The kernel library: jit kernels, their launchers and their default configurations.

Imports torch and triton only. Importing this package compiles nothing, but `@triton.jit` decides at import
time whether kernels run compiled or through the interpreter: set TRITON_INTERPRET=1 before importing it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional

from convtune.errors import ConfigError
from convtune.kernels import (fold_igemm, fused_gluon, implicit_gemm, llvm_opt, nchw_1x1, nchw_igemm, nhwc_igemm,
                              nhwc_split_n, nhwc_streamk, pins, seed)
from convtune.kernels.common import Launched, Meta, validate_meta, validate_precision


llvm_opt.install()  # our kernels compile at llvm_opt's level (a workaround for an LLVM miscompile)


@dataclass(frozen=True)
class KernelVariant:
    """One kernel algorithm: how to launch it, its default configuration, and its source identity."""

    name: str
    launch: Callable[..., Launched]
    default_meta: Callable[..., Meta]  # (out_channels, stride_w, width, precision) → the class default
    source_hash: str
    tf32_ties: str  # how `tf32` breaks rounding ties ("away" or "even": kernels/precision.py)
    # launch's arguments → a call that launches with everything checked and planned once, as the library's call
    # does after a signature's first (convtune.library.functional); None where the library does not run the variant
    prepared: Optional[Callable[..., Callable[[], Any]]] = None
    # None: runs on any device (the Triton interpreter too) and any convolution the common checks allow; else what the
    # variant is restricted to, in words (its launch refuses the rest with UnsupportedProblem)
    restricted_to: Optional[str] = None
    # the precisions it runs (None: every one, precision.PRECISIONS), and the CUDA compute capability it needs (None: any
    # device, the interpreter too): what checks over every variant (convtune.commands.verify) read, rather than lists of names
    precisions: Optional[tuple[str, ...]] = None
    compute_capability: Optional[tuple[int, int]] = None
    # what runs of this same kernel recorded as its source hash before its identity became its jit code (issue 43):
    # resume and promote take those runs as this kernel's
    previous_hashes: tuple[str, ...] = ()

    def runs_precision(self, precision: str) -> bool:
        return self.precisions is None or precision in self.precisions

    def runs_on(self, capability: Optional[tuple[int, int]]) -> bool:
        """Whether it runs on a device of that compute capability (None: the Triton interpreter)."""
        return self.compute_capability is None or self.compute_capability == capability


VARIANTS: dict[str, KernelVariant] = {
    "seed": KernelVariant("seed", seed.launch, seed.default_meta, seed.SOURCE_HASH, seed.TF32_TIES,
                          previous_hashes=seed.PREVIOUS_SOURCE_HASHES),
    "implicit_gemm": KernelVariant("implicit_gemm", implicit_gemm.launch, implicit_gemm.default_meta,
                                   implicit_gemm.SOURCE_HASH, implicit_gemm.TF32_TIES, implicit_gemm.prepared,
                                   previous_hashes=implicit_gemm.PREVIOUS_SOURCE_HASHES),
    "nhwc_igemm": KernelVariant("nhwc_igemm", nhwc_igemm.launch, nhwc_igemm.default_meta, nhwc_igemm.SOURCE_HASH,
                                nhwc_igemm.TF32_TIES, nhwc_igemm.prepared,
                                previous_hashes=nhwc_igemm.PREVIOUS_SOURCE_HASHES),
    "nhwc_preround": KernelVariant("nhwc_preround", nhwc_igemm.launch_preround, nhwc_igemm.default_meta_preround,
                                   nhwc_igemm.SOURCE_HASH, nhwc_igemm.TF32_TIES, nhwc_igemm.prepared_preround,
                                   previous_hashes=nhwc_igemm.PREVIOUS_SOURCE_HASHES),
    "nhwc_streamk": KernelVariant("nhwc_streamk", nhwc_streamk.launch, nhwc_streamk.default_meta,
                                  nhwc_streamk.SOURCE_HASH, nhwc_streamk.TF32_TIES, nhwc_streamk.prepared,
                                  previous_hashes=nhwc_streamk.PREVIOUS_SOURCE_HASHES),
    "nhwc_split_n": KernelVariant("nhwc_split_n", nhwc_split_n.launch, nhwc_split_n.default_meta,
                                  nhwc_split_n.SOURCE_HASH, nhwc_split_n.TF32_TIES, nhwc_split_n.prepared,
                                  previous_hashes=nhwc_split_n.PREVIOUS_SOURCE_HASHES),
    "fold_igemm": KernelVariant("fold_igemm", fold_igemm.launch, fold_igemm.default_meta, fold_igemm.SOURCE_HASH,
                                fold_igemm.TF32_TIES, fold_igemm.prepared,
                                previous_hashes=fold_igemm.PREVIOUS_SOURCE_HASHES),
    "fused_gluon": KernelVariant("fused_gluon", fused_gluon.launch, fused_gluon.default_meta, fused_gluon.SOURCE_HASH,
                                 fused_gluon.TF32_TIES, fused_gluon.prepared, fused_gluon.RESTRICTED_TO,
                                 fused_gluon.PRECISIONS, fused_gluon.COMPUTE_CAPABILITY,
                                 previous_hashes=fused_gluon.PREVIOUS_SOURCE_HASHES),
    "nchw_1x1": KernelVariant("nchw_1x1", nchw_1x1.launch, nchw_1x1.default_meta, nchw_1x1.SOURCE_HASH,
                              nchw_1x1.TF32_TIES, nchw_1x1.prepared, nchw_1x1.RESTRICTED_TO, nchw_1x1.PRECISIONS,
                              previous_hashes=nchw_1x1.PREVIOUS_SOURCE_HASHES),
    "nchw_igemm": KernelVariant("nchw_igemm", nchw_igemm.launch, nchw_igemm.default_meta, nchw_igemm.SOURCE_HASH,
                                nchw_igemm.TF32_TIES, nchw_igemm.prepared, nchw_igemm.RESTRICTED_TO, nchw_igemm.PRECISIONS,
                                previous_hashes=nchw_igemm.PREVIOUS_SOURCE_HASHES),
}
# The variants that run anywhere, on any convolution: what a check over random shapes on any device can run
GENERAL = tuple(sorted(name for name, v in VARIANTS.items()
                       if v.restricted_to is None and v.precisions is None and v.compute_capability is None))


def configured(variant: KernelVariant, pins_file: Path, gpu: str, problem: Any, precision: str,
               training: bool = False) -> tuple[pins.Pinned, str]:
    """What `variant`'s pins say for a call: the pin for (gpu, variant, problem, precision), else the nearest
    pinned shape of the same geometry, else the variant's default for the problem's class. A pin may say
    pins.TORCH (torch's convolution won the contest for that key) or name another kernel (a pins.KernelPin: that
    kernel won it). `training` (a call that records gradients): a "+train" pin for the shape, exact or nearest,
    comes first. `problem` is a convtune.problem.ConvProblem (key(), out_channels, stride, width). Returns (Meta,
    KernelPin or pins.TORCH, source)."""
    data = pins.load(pins_file)
    found = None
    if training:
        found = pins.find(data, gpu, variant.name, pins.pin_key(problem.key(), precision, training=True))
    value, source = found or pins.lookup(data, gpu, variant.name, pins.pin_key(problem.key(), precision),
                                         lambda: _default(variant, problem, precision))
    return value, source


def configured_meta(variant: KernelVariant, pins_file: Path, gpu: str, problem: Any, precision: str) -> tuple[Meta, str]:
    """The kernel configuration a run of `variant` measures: as `configured`, but where the pin says torch or
    another kernel, the variant's default (a run measures this kernel; the source says what the library runs)."""
    value, source = configured(variant, pins_file, gpu, problem, precision)
    if isinstance(value, Meta):
        return value, source
    return _default(variant, problem, precision), f"{variant.name} default ({source} runs {pins.describe(value)})"


def library_choice(pins_file: Path, gpu: str, problem: Any, precision: str,
                   training: bool = False) -> tuple[pins.Pinned, str]:
    """What the library runs for a call of `problem` (its layout and channels pick the section, library_variant):
    a pins.KernelPin naming the kernel and its configuration, or pins.TORCH; and where that comes from."""
    home = get_variant(library_variant(problem.layout, problem.in_channels))
    value, source = configured(home, pins_file, gpu, problem, precision, training)
    return (pins.KernelPin(home.name, value) if isinstance(value, Meta) else value), source


def _default(variant: KernelVariant, problem: Any, precision: str) -> Meta:
    return variant.default_meta(problem.out_channels, problem.stride[1], problem.width, precision)


# The library's choice (convtune.conv2d; the tracker's `kernel=library`): implicit_gemm for an NCHW call,
# nhwc_igemm for a channels_last one whose input has enough channels. nhwc_igemm's K steps are BLOCK_K (16-64)
# channels of one tap: with fewer channels most of each step is masked (L1 #50's 3 channels: 7.37 ms channels_last
# against 0.52 ms through implicit_gemm on the H200, docs/evidence/h200_issue13_vs_cudnn_spin.txt at ba42e38), and its
# 16-byte loads and TMA need C_in % 4 == 0.
LIBRARY = "library"
NHWC_MIN_CHANNELS = 16
LIBRARY_KERNELS = pins.LIBRARY_KERNELS  # what a pin may name and a promote of kernel=library contests


def library_variant(layout: str, in_channels: int) -> str:
    """The kernel variant the library runs, where no pin has decided otherwise, for a call in `layout` ("nchw" or
    "channels_last", the output's) whose input has `in_channels` channels; its pins decide the call
    (library_choice). An NCHW call stays on implicit_gemm by default although nhwc_igemm on a channels_last copy
    ran the suite's stride-1 layers 2-3x faster on the H200: it ran resnet50_layer1_1x1 5x slower (0.424 against
    0.085 ms; docs/PERFORMANCE.md, commit 24ed9a4), so that choice is left to a contest per shape."""
    if layout == "channels_last" and in_channels >= NHWC_MIN_CHANNELS and in_channels % 4 == 0:
        return "nhwc_igemm"
    return "implicit_gemm"


def get_variant(name: str) -> KernelVariant:
    try:
        return VARIANTS[name]
    except KeyError:
        raise ConfigError("kernel.name", name, f"one of {sorted(VARIANTS) + [LIBRARY]} ({LIBRARY}: the variant the "
                          "library runs for the problem)") from None


def variant_for(name: str, problem: Any) -> KernelVariant:
    """The variant whose pins section `kernel.name` names for `problem` (a ConvProblem): LIBRARY resolves by
    library_variant (what a pin there says runs is library_choice's answer)."""
    return get_variant(library_variant(problem.layout, problem.in_channels) if name == LIBRARY else name)


__all__ = ["GENERAL", "LIBRARY", "LIBRARY_KERNELS", "KernelVariant", "Launched", "Meta", "VARIANTS", "configured",
           "configured_meta", "get_variant", "library_choice", "library_variant", "validate_meta",
           "validate_precision", "variant_for"]
