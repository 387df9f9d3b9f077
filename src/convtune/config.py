"""Typed configuration: the dataclasses Hydra composes `conf/` onto, registered in its ConfigStore.

A wrong type or an unknown key fails at compose time with Hydra's own message; semantic checks
(powers of two, positive sizes, output > 0, ...) run in `convtune.app` before any kernel work.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from enum import Enum
from typing import Any, List, Optional

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING

# Relative L2 error allowed against a float64 reference. TF32 keeps 10 mantissa bits (unit roundoff 4.9e-4);
# the seed kernel measured 7.1e-4 and cuDNN TF32 2.9e-4 on L1 #50, so 2e-3 passes honest TF32
# and still catches a wrong index (which gives errors of order 1). IEEE fp32 measured 3.5e-7: 1e-5 leaves
# room for long reductions.
TOLERANCE = {"tf32": 2e-3, "tf32_trunc": 2e-3, "tf32x3": 1e-5, "ieee": 1e-5}
# A half-precision output is rounded to its dtype once (unit roundoff 2^-8 for bfloat16, 2^-11 for float16): on L1 #50
# fold_igemm's relative L2 error was 1.7e-3 in bfloat16 and 2.1e-4 in float16 (torch's 2.3e-3 and 3.0e-4, H200); the
# judge also requires the error to be no worse than torch's own (measure/correctness.py). Float32's math mode
# (`precision`) does not apply.
HALF_TOLERANCE = {"bfloat16": 1e-2, "float16": 2e-3}


def tolerance(precision: str, dtype: str = "float32") -> float:
    """The relative L2 error against float64 a run of this precision and dtype may have (measure/correctness.py)."""
    return HALF_TOLERANCE.get(dtype) or TOLERANCE[precision]



def enum_value(v: Any) -> Any:
    """A config value as plain data: the string of a config Enum (precision, device, ...), else itself."""
    return v.value if hasattr(v, "value") else v


class Precision(Enum):
    tf32 = "tf32"  # tensor-core TF32 dot, operands rounded to nearest as cuDNN does (torch's fp32 default)
    tf32_trunc = "tf32_trunc"  # Triton's plain TF32 dot (operands truncated): does not match torch
    tf32x3 = "tf32x3"  # fp32-class accuracy from three TF32 products per multiply (split a = hi + lo)
    ieee = "ieee"  # true fp32 (FMA on CUDA cores)


class Check(Enum):
    kernelbench = "kernelbench"  # float64 tolerance AND torch's own output by allclose(atol=rtol=1e-4), as the judge
    float64 = "float64"  # the float64 tolerance only (for tf32_trunc, or a study of accuracy itself)


class Dtype(Enum):
    float32 = "float32"  # its math mode is `precision`
    bfloat16 = "bfloat16"  # 16-bit operands on tensor cores, float32 accumulation, a bfloat16 output (as torch)
    float16 = "float16"


class DeviceChoice(Enum):
    auto = "auto"  # CUDA if present, else the Triton interpreter
    cuda = "cuda"
    interpreter = "interpreter"


class Profile(Enum):
    none = "none"
    ncu = "ncu"  # re-launch once under Nsight Compute and log its counters (app.py)


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
    layout: str = "nchw"  # the input's memory format: nchw or channels_last (the output follows it, as in torch)
    # what follows the convolution in the same kernel, in order: ops of convtune.problem.EPILOGUE_OPS ([] = none)
    epilogue: List[str] = field(default_factory=list)
    description: str = ""


@dataclass
class KernelConfig:
    name: str = MISSING  # a variant's name, or `library` (conf/kernel/: config.yaml's defaults choose one)


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
    parent_run: Optional[str] = None  # a run of the experiment that a sweep's parent run and promote's decision nest
    # under (tune_model.py: the model's run)


@dataclass
class PromoteConfig:
    top_k: int = 3  # candidates re-measured against the current pin
    torch: bool = True  # torch's own convolution (cuDNN) at the same precision contends too; if it wins, the pin says torch
    min_gain: float = 0.02  # the brief: keep the pin unless the gain is at least 1–2 %
    confidence: float = 0.95  # the bootstrap lower bound of the speed ratio must clear 1 + min_gain
    rounds: int = 15  # interleaved rounds (A B C A B C ...)
    reps: int = 10  # timed calls per contender per round
    remeasure: bool = True  # false: decide from logged numbers (and allow writing a pin for another GPU)
    allow_stale: bool = False  # admit runs made with an older kernel source
    device_name: Optional[str] = None  # the GPU whose runs and pin to consider; null = this machine's
    dry_run: bool = False  # decide and report, write nothing
    after_sweep: bool = False  # the sweep callback runs promote when a sweep ends (micro-tune preset)


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
    precision: Precision = Precision.tf32  # float32's math mode; a bfloat16 or float16 problem records tf32
    dtype: Optional[Dtype] = None  # the problem's element type; null = the problem file's (float32 unless it says)
    check: Check = Check.kernelbench  # what makes a run correct (convtune.measure.correctness)
    device: DeviceChoice = DeviceChoice.auto
    seed: int = 0  # seeds the input generator
    profile: Profile = Profile.none
    promote: PromoteConfig = field(default_factory=PromoteConfig)
    pins_file: Optional[str] = None  # null = the library's pins (src/convtune/pins.yaml, or $CONVTUNE_PINS)
    export: Optional[str] = None  # promote.py export=kernelbench: write the pinned kernel in the brief's format
    export_path: Optional[str] = None  # null = exports/<problem>.py
    resume: bool = True  # a sweep skips configurations already measured alike (same identity, params, timing)
    requires_gpu: bool = False  # a preset that means nothing without a GPU (vs_cudnn) refuses the interpreter


class Layout(Enum):
    nchw = "nchw"
    channels_last = "channels_last"


@dataclass
class TuneModelConfig:
    """tune_model.py's keys (conf/tune_model.yaml): a whole model's convolutions tuned in one command."""
    model: str = MISSING  # a torchvision.models name (resnet50), or package.module:factory (called with no arguments)
    input: Optional[List[int]] = None  # one sample's shape [C, H, W]; null = [3, 224, 224] (torchvision models)
    batch: int = 32
    layout: Layout = Layout.nchw  # the input's and the model's memory format
    train: bool = False  # decide the calls that record gradients, from SGD train steps (else eval forwards)
    compile: bool = False  # decide the calls inside torch.compile, from compiled eval forwards ("+compiled" pins)
    autocast: bool = False  # run the float32 model under torch.autocast (in `dtype`, bfloat16 by default), as users do
    dtype: Optional[Dtype] = None  # the model's (or autocast's) dtype; null = float32, or bfloat16 with autocast
    fold_bn: bool = False  # eval: fold each batch norm into its convolution, its ReLU into the kernel (convert's)
    precision: Precision = Precision.tf32  # float32's math mode
    device: DeviceChoice = DeviceChoice.auto  # auto: the GPU (needed: pins are per GPU); interpreter: a CPU dry run
    shapes: Optional[int] = None  # tune only the N shapes with the most FLOPs per model call; null = all
    turns: int = 200  # end to end: turns of interleaved steps (each configuration once a turn)
    warmup: int = 10  # untimed turns first
    resume: bool = True  # shapes the model's run decided before are not tuned again
    measure_only: bool = False  # time the model as the library runs it now: tune nothing, write no pin
    pins_file: Optional[str] = None  # null = this GPU's per-user overlay (read before the packaged pins)
    sweep: List[str] = field(default_factory=list)  # extra overrides for every shape's run.py (promote.rounds=7)
    tracking: TrackingConfig = field(default_factory=TrackingConfig)


def register_configs() -> None:
    """Register the schemas: `convtune_schema` (conf/config.yaml names it first in its defaults) and
    `tune_model_schema` (conf/tune_model.yaml)."""
    ConfigStore.instance().store(name="convtune_schema", node=ConvtuneConfig)
    ConfigStore.instance().store(name="tune_model_schema", node=TuneModelConfig)


def exit_on_bad_yaml(root: Path) -> None:
    """For the entry points, before Hydra starts: a malformed file under conf/ or experiments/ is one line."""
    import sys

    from convtune.errors import ConfigFileError

    try:
        check_yaml_files(root / "conf", root / "experiments")
    except ConfigFileError as e:
        sys.exit(f"error: {e}")


def check_yaml_files(*folders: Path) -> None:
    """Every YAML file under `folders` parses, else one line naming the file, line and problem. Hydra reports a
    malformed preset with a 40-line traceback; this runs first, before Hydra reads anything (~10 ms)."""
    import yaml

    from convtune.errors import ConfigFileError

    seen = set()
    for folder in folders:
        for f in sorted(folder.rglob("*.yaml")):
            real = f.resolve()
            if real in seen:
                continue
            seen.add(real)
            try:
                yaml.safe_load(real.read_text(encoding="utf-8"))
            except UnicodeDecodeError as e:
                raise ConfigFileError(f, f"not UTF-8 text (byte {e.start})") from None
            except yaml.YAMLError as e:
                mark = getattr(e, "problem_mark", None)
                where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
                raise ConfigFileError(f, f"{where}not valid YAML ({getattr(e, 'problem', None) or e})") from None
