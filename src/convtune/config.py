"""Typed configuration: the dataclasses Hydra composes `conf/` onto, registered in its ConfigStore.

A wrong type or an unknown key fails at compose time with Hydra's own message; semantic checks
(powers of two, positive sizes, output > 0, ...) run in `convtune.app` before any kernel work.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import List, Optional

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING

# Relative L2 error allowed against a float64 reference. TF32 keeps 10 mantissa bits (unit roundoff 4.9e-4);
# the seed kernel measured 7.1e-4 and cuDNN TF32 2.9e-4 on L1 #50 (FACTS.md), so 2e-3 passes honest TF32
# and still catches a wrong index (which gives errors of order 1). IEEE fp32 measured 3.5e-7: 1e-5 leaves
# room for long reductions.
TOLERANCE = {"tf32": 2e-3, "ieee": 1e-5}


class Precision(Enum):
    tf32 = "tf32"  # tensor-core TF32 dot, fp32 accumulate: cuDNN's default for fp32 convs
    ieee = "ieee"  # true fp32


class DeviceChoice(Enum):
    auto = "auto"  # CUDA if present, else the Triton interpreter
    cuda = "cuda"
    interpreter = "interpreter"


class TimingMode(Enum):
    events = "events"  # CUDA events around each call, L2 flushed before each
    graph = "graph"  # reps calls captured in one CUDA graph, no launch gaps, warm L2


@dataclass
class ProblemConfig:
    name: str = MISSING
    batch: int = MISSING
    in_channels: int = MISSING
    height: int = MISSING
    width: int = MISSING
    out_channels: int = MISSING
    kernel_h: int = MISSING
    kernel_w: int = MISSING
    stride: List[int] = field(default_factory=lambda: [1, 1])
    padding: List[int] = field(default_factory=lambda: [0, 0])
    dilation: List[int] = field(default_factory=lambda: [1, 1])
    groups: int = 1
    bias: bool = True
    dtype: str = "float32"
    init: str = "rand"  # input distribution: rand (uniform [0,1), as KernelBench) or randn
    description: str = ""


@dataclass
class KernelConfig:
    name: str = "seed"


@dataclass
class BenchConfig:
    mode: TimingMode = TimingMode.events
    rounds: int = 5
    reps: int = 20
    warmup: int = 3
    flush_l2: bool = True
    cudnn_baseline: bool = True  # time torch's conv2d (cuDNN) once per problem for speedup_vs_cudnn
    interpreter_max_gflop: float = 0.05  # larger problems are refused under the Triton interpreter


@dataclass
class TrackingConfig:
    uri: str = "sqlite:///mlruns/mlflow.db"  # relative sqlite paths are taken from where run.py is started
    experiment: Optional[str] = None  # default: the problem's name ("<name> [interpreter]" off-GPU)


@dataclass
class ConvtuneConfig:
    problem: ProblemConfig = MISSING
    kernel: KernelConfig = MISSING
    bench: BenchConfig = MISSING
    tracking: TrackingConfig = MISSING
    # Launch meta-parameters, spelled as Triton spells them; null = the kernel variant's default.
    BLOCK_M: Optional[int] = None
    BLOCK_N: Optional[int] = None
    BLOCK_K: Optional[int] = None
    num_warps: Optional[int] = None
    num_stages: Optional[int] = None
    precision: Precision = Precision.tf32
    device: DeviceChoice = DeviceChoice.auto
    seed: int = 0  # seeds the input generator


def register_configs() -> None:
    """Register the schema as `convtune_schema`; conf/config.yaml names it first in its defaults."""
    ConfigStore.instance().store(name="convtune_schema", node=ConvtuneConfig)
