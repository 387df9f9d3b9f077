"""Where a job runs and what it runs on: device choice, the interpreter switch, provenance, the problem.

Shared by the jobs (app.py) and the sweep callback (sweep.py), so both name the experiment the same way.
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Optional

from omegaconf import DictConfig, OmegaConf

from convtune.config import ProblemConfig
from convtune.errors import ConfigError
from convtune.problem import ConvProblem

INTERPRETER = "interpreter"


def enum_value(v: Any) -> Any:
    """A config value as plain data: the string of a config Enum (precision, device, ...), else itself."""
    return v.value if hasattr(v, "value") else v


def resolve_device(choice: str) -> str:
    """'cuda' or 'interpreter'. TRITON_INTERPRET=1 in the environment forces the interpreter for 'auto'."""
    import torch

    forced = os.environ.get("TRITON_INTERPRET") == "1"
    if choice == "auto":
        return INTERPRETER if forced or not torch.cuda.is_available() else "cuda"
    if choice == "cuda":
        if not torch.cuda.is_available():
            raise ConfigError("device", "cuda", "'auto' or 'interpreter': no CUDA device is visible")
        if forced:
            raise ConfigError("device", "cuda", "'interpreter' while TRITON_INTERPRET=1 is set; unset it to use the GPU")
    return choice


def activate(device: str) -> None:
    """Select compiled or interpreted Triton; `@triton.jit` decides when the kernels module is imported."""
    want = device == INTERPRETER
    if "convtune.kernels" in sys.modules:
        have = os.environ.get("TRITON_INTERPRET") == "1"
        if have != want:
            raise RuntimeError(f"the kernels were already loaded for the {'interpreter' if have else 'GPU'} in this "
                               f"process; run device={device} in a fresh process")
        return
    if want:
        os.environ["TRITON_INTERPRET"] = "1"


def device_tags(device: str) -> dict[str, str]:
    import torch
    import triton

    tags = {"torch_version": str(torch.__version__), "triton_version": str(triton.__version__)}
    if device == INTERPRETER:
        return {**tags, "device": INTERPRETER, "compute_capability": "none"}
    major, minor = torch.cuda.get_device_capability()
    return {**tags, "device": torch.cuda.get_device_name(), "compute_capability": f"{major}.{minor}"}


def git_tags(where: Path = Path(__file__).parent) -> dict[str, str]:
    """The commit of the checkout that holds this package, and whether it has uncommitted changes."""
    def git(*args: str) -> Optional[str]:
        try:
            return subprocess.run(["git", "-C", str(where), *args], capture_output=True, text=True, timeout=10,
                                  check=True).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return None
    commit = git("rev-parse", "HEAD")
    if commit is None:
        return {"git_commit": "unknown", "git_dirty": "unknown"}
    return {"git_commit": commit, "git_dirty": str(bool(git("status", "--porcelain", "--untracked-files=no")))}


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


def choose_target(cfg: DictConfig, task_overrides: Iterable[str], config_dir: Optional[Path]) -> Target:
    """Resolve the device; under the interpreter, swap an oversized default problem for `tiny` (announced),
    and refuse one the user named explicitly."""
    device = resolve_device(enum_value(cfg.device))
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


def target_for(cfg: DictConfig, hc: Any) -> Target:
    """choose_target with what Hydra knows: the task overrides and the primary config folder."""
    return choose_target(cfg, hc.overrides.task, main_config_dir(hc.runtime.config_sources))


def pins_path(cfg: DictConfig, base: Path) -> Path:
    """pins_file (relative to `base`, where the command was started) or the library's pins file.
    Call after activate(): importing convtune.kernels.pins imports the kernels package."""
    from convtune.kernels.pins import default_path

    if cfg.pins_file:
        p = Path(cfg.pins_file)
        return p if p.is_absolute() else base / p
    return default_path()


def experiment_name(cfg: DictConfig, problem_name: str, device: str, problem_swept: bool = False) -> str:
    """tracking.experiment if set, else the problem's name ('suite' when a sweep covers several problems).
    Interpreter runs go to their own experiment so they never mix with GPU results."""
    name = cfg.tracking.experiment or ("suite" if problem_swept else problem_name)
    return f"{name} [interpreter]" if device == INTERPRETER else name
