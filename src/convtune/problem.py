"""A convolution problem's geometry: pure arithmetic, no torch, so every room can use it."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from convtune.errors import ConfigError, UnsupportedProblem

# The element types a problem may have: float32 (its math mode is `precision`), and the half precisions, which
# multiply on tensor cores, accumulate in float32 and return their own dtype, as torch's convolution does.
DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}
HALF_DTYPES = ("bfloat16", "float16")


def for_dtype(precision: str, dtype: str) -> str:
    """The precision a problem of `dtype` is recorded, pinned and decided under. For float32 it is the math mode asked
    for. A bfloat16 or float16 problem multiplies its 16-bit operands exactly on tensor cores and accumulates in float32
    whatever that mode says (torch's allow_tf32 does not touch a half-precision convolution either), so it is always
    `tf32`, torch's default: one run and one pin per half-precision shape, not one per float32 mode."""
    return "tf32" if dtype in HALF_DTYPES else precision


LAYOUTS = ("nchw", "channels_last")

# What may follow a convolution (and its own bias), applied in order to the float32 sums before the one rounding to the
# output's dtype and the one store: `bias` adds a per-channel vector, `bn` a per-channel scale and shift (an eval batch
# norm), `scale` multiplies by a per-channel vector (a scalar factor is a constant one), `add` a residual tensor of the
# output's shape and layout, the rest are torch's activations at their defaults (gelu exact, leaky_relu's slope 0.01).
# These are POINTWISE_OPS: one pass computes them. `bn_train` is a batch norm in training mode: it normalizes the
# convolution's output by the batch's own mean and (biased) variance per channel, then scales and shifts it, as
# torch.nn.BatchNorm2d does while training (KernelBench runs its Models so). It needs the whole batch's statistics
# before any output, so a kernel that fuses it runs a statistics pass first (kernels/batch_stats.py), and it comes first
# in a chain, where it normalizes the convolution's output itself.
ACTIVATIONS = ("relu", "relu6", "silu", "gelu", "hardswish", "leaky_relu")
POINTWISE_OPS = ("bias", "bn") + ACTIVATIONS + ("add", "scale")
EPILOGUE_OPS = POINTWISE_OPS + ("bn_train",)
VECTOR_OPS = ("bias", "bn", "scale", "bn_train")  # the ops with per-channel vectors: (scale, shift) rows
MAX_EPILOGUE_OPS = 6  # a kernel takes the chain as one constexpr of 4 bits an op (int32)
LEAKY_RELU_SLOPE = 0.01  # torch.nn.LeakyReLU's default
BN_EPS = 1e-5  # torch.nn.BatchNorm2d's default, bn_train's
# The ops a 16-bit problem may not have. bn_train divides by the batch's standard deviation, so a one-unit difference in
# the last place of the convolution's 16-bit output (two float32 sums in another order, rounded either side of a
# midpoint) moves a normalized output by (γ/σ) units: on KernelBench level 2 #73 in bfloat16 (H200), torch.compile's
# output has 1,966,680 of 130,056,192 elements outside allclose(1e-2) of eager torch's, and aten's convolution (cuDNN
# off) 9,371,399, so no kernel can be judged against torch's there.
FLOAT32_ONLY_OPS = ("bn_train",)


def parse_epilogue(value: Any, key: str = "problem.epilogue") -> tuple[str, ...]:
    """A chain as a tuple of op names, from a list (`[bn, add, relu]`) or a comma-separated string (`bn,add,relu`);
    empty: the convolution alone. At most one `add` (a kernel reads one residual), `bn_train` only first (the statistics
    pass sums the convolution's output), and MAX_EPILOGUE_OPS ops."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return ()
    ops = [s.strip() for s in value.split(",")] if isinstance(value, str) else [str(s).strip() for s in value]
    unknown = [op for op in ops if op not in EPILOGUE_OPS]
    if unknown:
        raise ConfigError(key, list(ops), f"ops from {list(EPILOGUE_OPS)} (unknown: {unknown})")
    if ops.count("add") > 1:
        raise ConfigError(key, list(ops), "at most one `add` (a kernel reads one residual tensor)")
    if "bn_train" in ops[1:]:
        raise ConfigError(key, list(ops), "`bn_train` first only (it normalizes the convolution's output by the "
                                          "batch's statistics, which the statistics pass sums)")
    if len(ops) > MAX_EPILOGUE_OPS:
        raise ConfigError(key, list(ops), f"at most {MAX_EPILOGUE_OPS} ops")
    return tuple(ops)


@dataclass(frozen=True)
class ConvProblem:
    """One conv2d: input [batch, in_channels, height, width] * weight [out_channels, in_channels, kh, kw]."""

    name: str
    batch: int
    in_channels: int
    height: int
    width: int
    out_channels: int
    kernel_h: int
    kernel_w: int
    stride: tuple[int, int] = (1, 1)
    padding: tuple[int, int] = (0, 0)
    dilation: tuple[int, int] = (1, 1)
    groups: int = 1
    bias: bool = True
    dtype: str = "float32"
    init: str = "rand"
    layout: str = "nchw"  # the input's memory format: nchw (contiguous) or channels_last (NHWC in memory)
    epilogue: tuple[str, ...] = ()  # what follows the convolution and its bias, in order (parse_epilogue)

    @staticmethod
    def from_mapping(m: Any) -> "ConvProblem":
        """From the `problem` config node (or any mapping with the same keys); checks every field."""
        d = {k: m[k] for k in ConvProblem.__dataclass_fields__ if k in m}
        for key in ("stride", "padding", "dilation"):
            if key in d:
                v = list(d[key])
                if len(v) != 2:
                    raise ConfigError(f"problem.{key}", v, "a pair [height, width]")
                d[key] = (int(v[0]), int(v[1]))
        if "epilogue" in d:
            d["epilogue"] = parse_epilogue(d["epilogue"])
        p = ConvProblem(**d)
        p.validate()
        return p

    def validate(self) -> None:
        for key in ("batch", "in_channels", "height", "width", "out_channels", "kernel_h", "kernel_w"):
            if getattr(self, key) < 1:
                raise ConfigError(f"problem.{key}", getattr(self, key), "a positive integer")
        for key, lo in (("stride", 1), ("padding", 0), ("dilation", 1)):
            for v in getattr(self, key):
                if v < lo:
                    raise ConfigError(f"problem.{key}", list(getattr(self, key)), f"both entries >= {lo}")
        if self.dtype not in DTYPE_BYTES:
            raise ConfigError("problem.dtype", self.dtype, f"one of {list(DTYPE_BYTES)}")
        if self.layout not in LAYOUTS:
            raise ConfigError("problem.layout", self.layout, f"one of {list(LAYOUTS)} (the input's memory format)")
        if self.init not in ("rand", "randn"):
            raise ConfigError("problem.init", self.init, "'rand' (uniform [0,1), as KernelBench) or 'randn'")
        if parse_epilogue(self.epilogue) != tuple(self.epilogue):
            raise ConfigError("problem.epilogue", self.epilogue, "a tuple of op names")
        refused = [op for op in self.epilogue if op in FLOAT32_ONLY_OPS]
        if self.dtype in HALF_DTYPES and refused:
            raise UnsupportedProblem(f"problem.epilogue: {', '.join(refused)} in {self.dtype} is not judgeable: a batch "
                                     "norm with the batch's statistics turns one unit in the last place of the 16-bit "
                                     "convolution into γ/σ units, past KernelBench's allclose(1e-2) for torch's own "
                                     "other paths")
        if self.groups != 1:
            raise UnsupportedProblem(f"problem.groups={self.groups} is not supported yet (only 1)")
        if self.out_h < 1 or self.out_w < 1:
            raise ConfigError(
                "problem", f"{self.height}x{self.width} input, {self.kernel_h}x{self.kernel_w} kernel",
                f"an output of at least 1x1 (this gives {self.out_h}x{self.out_w}: "
                "(size + 2·padding − dilation·(kernel−1) − 1) // stride + 1)")

    @property
    def out_h(self) -> int:
        return (self.height + 2 * self.padding[0] - self.dilation[0] * (self.kernel_h - 1) - 1) // self.stride[0] + 1

    @property
    def out_w(self) -> int:
        return (self.width + 2 * self.padding[1] - self.dilation[1] * (self.kernel_w - 1) - 1) // self.stride[1] + 1

    @property
    def input_shape(self) -> tuple[int, int, int, int]:
        return (self.batch, self.in_channels, self.height, self.width)

    @property
    def weight_shape(self) -> tuple[int, int, int, int]:
        return (self.out_channels, self.in_channels, self.kernel_h, self.kernel_w)

    @property
    def output_shape(self) -> tuple[int, int, int, int]:
        return (self.batch, self.out_channels, self.out_h, self.out_w)

    @property
    def flops(self) -> int:
        """2·N·Cout·OH·OW·Cin·KH·KW: one multiply and one add per MAC (bias not counted)."""
        return 2 * self.batch * self.out_channels * self.out_h * self.out_w * self.in_channels * self.kernel_h * self.kernel_w

    @property
    def output_elems(self) -> int:
        return self.batch * self.out_channels * self.out_h * self.out_w

    @property
    def min_bytes(self) -> int:
        """The fewest bytes a kernel that fuses the epilogue must move: input, weight, bias and the epilogue's vectors
        and residual read once, output written once."""
        vectors = sum(2 if op in ("bn", "bn_train") else 1 for op in self.epilogue if op in VECTOR_OPS)
        elems = (self.batch * self.in_channels * self.height * self.width
                 + self.out_channels * self.in_channels * self.kernel_h * self.kernel_w
                 + self.out_channels * ((1 if self.bias else 0) + vectors)
                 + self.output_elems * (2 if "add" in self.epilogue else 1))
        return elems * DTYPE_BYTES[self.dtype]

    def key(self) -> str:
        """The problem's identity, without its name: shape, strides/layout, dtype, bias, and the epilogue where it has
        one (the keys of problems without one are those pins and runs recorded before the key existed)."""
        s, p, d = self.stride, self.padding, self.dilation
        return (f"n{self.batch}-c{self.in_channels}-h{self.height}-w{self.width}-k{self.out_channels}"
                f"-r{self.kernel_h}x{self.kernel_w}-s{s[0]}x{s[1]}-p{p[0]}x{p[1]}-d{d[0]}x{d[1]}-g{self.groups}"
                f"-{'bias' if self.bias else 'nobias'}-{self.layout}-{self.dtype}"
                + (f"-then-{'.'.join(self.epilogue)}" if self.epilogue else ""))

    def params(self) -> dict[str, Any]:
        """Flat `problem.*` params for the tracker."""
        out = {f"problem.{k}": (list(v) if isinstance(v, tuple) else v) for k, v in asdict(self).items()}
        del out["problem.epilogue"]
        if self.epilogue:  # a run of the convolution alone records none: its params are those of every such run
            out["problem.epilogue"] = ",".join(self.epilogue)
        out.update({"problem.out_h": self.out_h, "problem.out_w": self.out_w})
        return out
