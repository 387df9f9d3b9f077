"""The setup of a job, a promote, an export or a micro-tune, resolved once from the composed config.

`resolve(cfg)` decides, in this order and nowhere else: the device (CUDA or the Triton interpreter, which must
be settled before the kernels are imported), the problem (under the interpreter an oversized default becomes
`tiny`, announced; one named explicitly is refused), the kernel variant, precision and check, the pins file and
the launch configuration (the given keys over the pin or the default), the tracking store and experiment, the
timing settings (reduced under the interpreter, whose host-clock numbers say nothing about a GPU), and the run's
identity (GPU, kernel, source hash, problem key, precision) from which its tags, promote's search and the pin
key derive. Entry points import the kernels (directly or through measure/ and tune/) only after `resolve`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Iterable, Optional, Sequence

from omegaconf import DictConfig, OmegaConf

from convtune.config import ProblemConfig
from convtune.errors import ConfigError, UnsupportedProblem
from convtune.problem import ConvProblem, for_dtype
from convtune.record import META_KEYS, Identity, Param, Tag
from convtune.track.store import resolve_uri

from convtune.config import enum_value
from convtune.config_keys import check_known_keys, check_values, hydra_node
from convtune.device import INTERPRETER, activate, capability_of, check_device, device_tags, git_tags, resolve_device, sweep_device_for_job


def named_on_command_line(task_overrides: Iterable[str], key: str) -> bool:
    return any(o.split("=", 1)[0].lstrip("+~") == key for o in task_overrides)


def main_config_dir(config_sources: Iterable[Any]) -> Optional[Path]:
    for src in config_sources:
        if src.provider == "main" and src.schema == "file":
            return Path(src.path)
    return None


@dataclass
class Target:
    device: str
    problem: DictConfig  # the `problem` node to run (possibly switched to tiny for the interpreter)
    notice: Optional[str]  # one line for the user when the problem was switched


def choose_target(cfg: DictConfig, task_overrides: Iterable[str], config_dir: Optional[Path],
                  device: Optional[str] = None) -> Target:
    """Resolve the device (or take `device` as decided); under the interpreter, swap an oversized default
    problem for `tiny` (announced), and refuse one the user named explicitly."""
    device = device or resolve_device(enum_value(cfg.device))
    problem = cfg.problem
    if device != INTERPRETER:
        return Target(device, problem, None)
    try:
        gflop = ConvProblem.from_mapping(problem).flops / 1e9
    except ValueError:
        return Target(device, problem, None)  # an invalid problem fails its own run, with its own message
    limit = cfg.bench.interpreter_max_gflop
    if gflop <= limit:
        return Target(device, problem, None)
    if named_on_command_line(task_overrides, "problem") or config_dir is None:
        raise ConfigError("problem", problem.name,
                          f"at most {limit} GFLOP under the Triton interpreter (it has {gflop:.3g}); "
                          "use problem=tiny, or run on a GPU")
    tiny = OmegaConf.merge(OmegaConf.structured(ProblemConfig), OmegaConf.load(config_dir / "problem" / "tiny.yaml"))
    return Target(device, tiny, f"no CUDA device: running problem=tiny through the Triton interpreter instead of "
                                f"{problem.name} ({gflop:.3g} GFLOP); name a problem to choose another")


def target_for(cfg: DictConfig, hc: Any, device: Optional[str] = None) -> Target:
    """choose_target with what Hydra knows: the task overrides and the primary config folder."""
    return choose_target(cfg, hc.overrides.task, main_config_dir(hc.runtime.config_sources), device)


def pins_files(cfg: DictConfig, base: Path, gpu: str) -> tuple[Optional[Path], list[Path]]:
    """(the file promote writes, the files read for what the library runs, first layer first).

    pins_file= (relative to `base`, where the command was started) is both, alone. Without it, `gpu`'s per-user
    overlay is written and is read over the library's pins ($CONVTUNE_PINS, else the package's): pins a user's promote
    writes, and its lock, never land in the package's source. The write target is None where the overlay is off.
    Call after activate(): importing convtune.pins imports the kernels package."""
    from convtune.pins import default_path
    from convtune.pins import overlay

    if cfg.pins_file:
        p = Path(cfg.pins_file).expanduser()
        p = p if p.is_absolute() else base / p
        return p, [p]
    mine = overlay.path_for(gpu)
    return mine, ([mine] if mine is not None else []) + [default_path()]


def measured_config(variant: Any, library: bool, files: list[Path], gpu: str, capability: Optional[tuple[int, int]],
                    problem: ConvProblem, precision: str) -> tuple[Any, str, Any]:
    """(the configuration a run measures, where it comes from, the variant it runs). `kernel=library` measures what the
    library would run for the problem (library/dispatch.decide with the files read and no first-use contest; a
    family pin too: a run of it here is the tracker's measurement of it on this GPU): the kernel a pin names at its
    configuration, or, where torch runs, the default variant at its default. A named variant measures its own pin,
    the nearest pinned shape or its default (dispatch.configuration); where its pin says torch or another kernel, its
    default, with the source saying what the library runs."""
    from convtune import kernels, pins
    from convtune.library import dispatch

    if library:
        d = dispatch.decide(problem, gpu, capability, precision, files=files, first_use_on=False)
        if isinstance(d.value, pins.KernelPin):
            return d.value.meta, d.source, kernels.get_variant(d.value.kernel)
    value, source = dispatch.configuration(variant, files, gpu, problem, precision)
    if isinstance(value, kernels.Meta):
        return value, source, variant
    default = kernels.default_meta(variant, problem, precision)
    return default, f"{variant.name} default ({source} runs {pins.describe(value)})", variant


def experiment_name(cfg: DictConfig, problem_name: str, device: str, problem_swept: bool = False) -> str:
    """tracking.experiment if set, else the problem's name ('suite' when a sweep covers several problems).
    Interpreter runs go to their own experiment so they never mix with GPU results."""
    name = cfg.tracking.experiment or ("suite" if problem_swept else problem_name)
    name = f"{name} [interpreter]" if device == INTERPRETER else name
    if len(name) > MAX_EXPERIMENT_NAME:
        key = "tracking.experiment" if cfg.tracking.experiment else "problem.name"
        raise ConfigError(key, f"{name[:40]}... ({len(name)} characters)", f"an experiment name of at most "
                          f"{MAX_EXPERIMENT_NAME} characters, the interpreter's ' [interpreter]' included (MLflow's limit)")
    return name


MAX_EXPERIMENT_NAME = 500  # MLflow's limit on an experiment's name


# Timing under the interpreter: 1 round of 1 call shows the pipeline works without spending time on a number
# nobody should read (0.23 s a call on `tiny`; the test suite measures ~45 jobs, and the 4 calls per job this
# saves against 2 rounds of 2 are ~40 s of its CPU time); promote's contest: 4 rounds of 1 call, enough to
# exercise the decision.
INTERPRETER_TIMING = dict(rounds=1, reps=1, warmup=0)
INTERPRETER_CONTEST = dict(rounds=4, reps=1)


def _short_value(value: Any) -> str:
    """A config value for a run name: a config group (problem, kernel) by its name."""
    return str(value.get("name", "?")) if isinstance(value, DictConfig) else str(enum_value(value))


@dataclass
class Setup:
    """Everything a command needs before it measures anything. `error` holds what made the setup incomplete
    (an invalid problem, a bad pin, ...): a job still records its run, failed, with what is known."""
    cfg: DictConfig
    cwd: Path
    device: str = "unknown"  # cuda | interpreter
    problem_node: Any = None  # the `problem` config node to run (tiny under the interpreter, if swapped)
    notice: Optional[str] = None  # one line for the user when the problem was swapped
    problem: Optional[ConvProblem] = None
    variant: Any = None  # convtune.kernels.KernelVariant: the kernel the run measures
    pin_variant: Any = None  # the variant whose pins section holds the key's pin (kernel=library: by the rule)
    precision: str = ""
    check: str = ""
    given: dict[str, Optional[int]] = field(default_factory=dict)  # the launch keys as the config gives them
    meta: Any = None  # convtune.kernels.Meta: the given keys over the configured (pinned or default) one
    meta_source: str = ""  # explicit | pin | pin (nearest ...) | default
    configured_meta: Any = None  # the pinned (or nearest pinned, or default) configuration, before the given keys
    configured_source: str = ""
    pins_path: Optional[Path] = None  # the file promote writes (None: nowhere, the overlay is off): pins_files
    pins_read: list[Path] = field(default_factory=list)  # what the library's pins are read from, first layer first
    device_tags: dict[str, str] = field(default_factory=dict)
    tracking_uri: str = ""
    timing: Any = None  # convtune.measure.bench.TimingSettings, as used
    error: Optional[Exception] = None

    @property
    def interpreted(self) -> bool:
        return self.device == INTERPRETER

    @property
    def gpu(self) -> str:
        """The device name runs are tagged with and pins are filed under (promote.device_name may name another)."""
        return self.device_tags.get(Tag.DEVICE, "unknown")

    @property
    def problem_name(self) -> str:
        return (self.problem_node or self.cfg.problem).name

    def identity(self, gpu: Optional[str] = None) -> Identity:
        assert self.problem is not None and self.variant is not None
        return Identity(gpu or self.gpu, self.variant.name, self.variant.source_hash, self.problem.key(), self.precision,
                        self.variant.previous_hashes)

    @property
    def kernel_name(self) -> str:
        """The variant the run measures (`kernel=library` resolved for the problem), else the name as given."""
        return self.variant.name if self.variant is not None else self.cfg.kernel.name

    def pin_key(self) -> str:
        from convtune.pins import pin_key

        return pin_key(self.identity().problem_key, self.precision)

    def experiment(self, problem_swept: bool = False) -> str:
        return experiment_name(self.cfg, self.problem_name, self.device, problem_swept)

    def contest_timing(self, rounds: int, reps: int) -> tuple[int, int]:
        if self.interpreted:
            return min(rounds, INTERPRETER_CONTEST["rounds"]), INTERPRETER_CONTEST["reps"]
        return rounds, reps

    def params(self) -> dict[str, Any]:
        """The run's params: the launch keys as run, what was chosen, and the timing settings as used."""
        cfg = self.cfg
        out: dict[str, Any] = {k: ("default" if v is None else v) for k, v in self.given.items()}
        out.update({Param.KERNEL: self.kernel_name, Param.PRECISION: self.precision, Param.CHECK: self.check,
                    Param.DEVICE_CHOICE: enum_value(cfg.device), Param.SEED: cfg.seed, Param.PROBLEM: self.problem_name})
        out.update({f"{Param.BENCH_PREFIX}{k}": enum_value(v) for k, v in cfg.bench.items()})
        if self.timing is not None and self.interpreted:
            out.update({f"{Param.BENCH_PREFIX}{k}": getattr(self.timing, k) for k in INTERPRETER_TIMING})
        if self.meta is not None:
            out.update(self.meta.as_dict())
        if self.problem is not None:
            out.update(self.problem.params())
        return out

    def measurement_params(self) -> dict[str, Any]:
        """The params that make two runs of one identity the same measurement (for resume)."""
        keep = set(META_KEYS) | {Param.CHECK, Param.SEED}
        return {k: v for k, v in self.params().items() if k in keep or k.startswith(Param.BENCH_PREFIX)}

    def tags(self) -> dict[str, Any]:
        """The run's tags as far as the setup knows them (measure adds its own)."""
        out: dict[str, Any] = {Tag.PROBLEM: self.problem_name, Tag.PRECISION: self.precision,
                               Tag.KERNEL: self.kernel_name, **git_tags(), **self.device_tags}
        if self.variant is not None:
            out[Tag.KERNEL_SOURCE_HASH] = self.variant.source_hash
        if self.meta is not None:
            out[Tag.META_SOURCE] = self.meta_source
        if self.problem is not None:
            out[Tag.PROBLEM_KEY] = self.problem.key()
        if os.environ.get("CONVTUNE_GPU_SLOT") is not None:  # the GPU the gpus launcher gave this job (gpu_pool)
            out[Tag.GPU_SLOT] = os.environ["CONVTUNE_GPU_SLOT"]
        if os.environ.get("CONVTUNE_BATCH_JOB"):  # the scheduler's job id (launch.slurm.run_one)
            out[Tag.BATCH_JOB] = os.environ["CONVTUNE_BATCH_JOB"]
        return out

    def label(self) -> str:
        if self.meta is not None:
            return self.meta.label()
        return " ".join(f"{k}={'default' if v is None else v}" for k, v in self.given.items())

    def run_name(self, varied: Sequence[str] = ()) -> str:
        """The launch configuration in short (M64-N64-K32-w4-s3); in a sweep, what the sweep varies comes first
        (w2-M48 · N64-K32-s3): the MLflow UI shows ~13 characters of a child run's name, and "M32-N64-K32-…"
        told a sweep over num_warps nothing."""
        if self.meta is None:
            return "-".join("default" if v is None else str(v) for v in self.given.values())
        parts = dict(zip(self.meta.keys(), self.meta.short().split("-")))
        first = [parts[k] if k in parts else _short_value(OmegaConf.select(self.cfg, k, default="?")) for k in varied]
        rest = [part for k, part in parts.items() if k not in varied]
        return "-".join(first) + " · " + "-".join(rest) if first else self.meta.short()

    def raise_error(self) -> None:
        if self.error is not None:
            raise self.error


def refuse_early(cfg: DictConfig, device: Optional[str] = None) -> Target:
    """What makes a whole sweep pointless, checked once before any job: unknown keys, a GPU preset without a
    GPU, an oversized problem named for the interpreter. Raises ConfigError; returns the sweep's target.
    `device`: the device the jobs will resolve on their own nodes (planned_device), not this machine's."""
    hc = hydra_node(cfg)
    check_known_keys(cfg, hc.overrides.task)  # a sweep's parameters are among the task overrides
    check_values(cfg)
    target = target_for(cfg, hc, device)
    check_device(cfg, target.device)
    return target


def resolve(cfg: DictConfig, device: Optional[str] = None, swap_problem: bool = True,
            sweep_device: Optional[str] = None) -> Setup:
    """The setup for `cfg`. `device` forces a device (export: the problem as named, since writing runs no
    kernel); `swap_problem=False` keeps an oversized problem under the interpreter (no kernel will run);
    `sweep_device`: a sweep job's device as its sweep decided it (sweep_device_for_job checks it here)."""
    from convtune.measure.bench import TimingSettings

    hc = hydra_node(cfg)
    s = Setup(cfg=cfg, cwd=Path(hc.runtime.cwd), precision=enum_value(cfg.precision), check=enum_value(cfg.check),
              given={k: cfg[k] for k in META_KEYS}, problem_node=cfg.problem)
    s.tracking_uri = resolve_uri(cfg.tracking.uri, s.cwd)
    try:
        check_known_keys(cfg)
        check_values(cfg)
        if device is not None or not swap_problem:
            s.device = device or resolve_device(enum_value(cfg.device))
        else:
            target = target_for(cfg, hc, sweep_device and sweep_device_for_job(sweep_device))
            s.device, s.problem_node, s.notice = target.device, target.problem, target.notice
        check_device(cfg, s.device)
        activate(s.device)
        s.device_tags = device_tags(s.device)
        from convtune import kernels  # only now: TRITON_INTERPRET is settled

        b = cfg.bench
        s.timing = TimingSettings(enum_value(b.mode), b.rounds, b.reps, b.warmup, b.flush_l2)
        if s.interpreted:
            s.timing = replace(s.timing, rounds=min(b.rounds, INTERPRETER_TIMING["rounds"]),
                               reps=min(b.reps, INTERPRETER_TIMING["reps"]), warmup=INTERPRETER_TIMING["warmup"])
        s.problem = ConvProblem.from_mapping(s.problem_node)
        if cfg.dtype is not None:
            s.problem = replace(s.problem, dtype=enum_value(cfg.dtype))
        s.precision = for_dtype(s.precision, s.problem.dtype)
        s.variant = s.pin_variant = kernels.variant_for(cfg.kernel.name, s.problem)
        gpu = cfg.promote.device_name or s.gpu
        s.pins_path, s.pins_read = pins_files(cfg, s.cwd, gpu)
        s.configured_meta, s.configured_source, s.variant = measured_config(
            s.variant, cfg.kernel.name == kernels.LIBRARY, s.pins_read, gpu, capability_of(s.device_tags), s.problem,
            s.precision)
        if not s.variant.fuses(s.problem.epilogue):  # the kernel that runs: kernel=library's pin may name another
            fusing = sorted(n for n, v in kernels.VARIANTS.items() if v.fuses(s.problem.epilogue))
            runs = f" ({cfg.kernel.name} runs it here: {s.configured_source})" if s.variant.name != cfg.kernel.name else ""
            raise UnsupportedProblem(f"kernel {s.variant.name}{runs} does not fuse the epilogue "
                                     f"{','.join(s.problem.epilogue)}; kernels that do: {', '.join(fusing) or 'none'}")
        s.meta = kernels.Meta.fill(s.given, s.configured_meta)
        s.meta_source = "explicit" if all(v is not None for v in s.given.values()) else s.configured_source
    except (ValueError, RuntimeError) as e:  # ConfigError, PinsError, UnsupportedProblem, a device mismatch
        s.error = e
    return s
