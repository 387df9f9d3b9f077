"""The device a command runs on: CUDA or the Triton interpreter, chosen once and settled before the kernels are
imported (`@triton.jit` decides at import whether a kernel is compiled or interpreted); the device and checkout tags
every run carries; and a sweep job's device, planned by its sweep and checked on the job's own node.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Optional

from omegaconf import DictConfig

from convtune.config import enum_value
from convtune.errors import ConfigError

INTERPRETER = "interpreter"


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
    if want and os.environ.get("TRITON_INTERPRET") != "1" and "triton.language" in sys.modules:
        # Triton's own jit library (tl.cdiv, tl.sum, ...) was defined compiled when it was imported; kernels
        # interpreted now would call it and fail ("Cannot call @triton.jit'd outside of the scope of a kernel")
        raise RuntimeError("Triton was imported before the interpreter was chosen; set TRITON_INTERPRET=1 before "
                           "Triton is imported (or run device=interpreter in a fresh process)")
    if want:
        os.environ["TRITON_INTERPRET"] = "1"


def capability_of(tags: dict[str, str]) -> Optional[tuple[int, int]]:
    """The compute capability device_tags recorded, as (major, minor); None on the interpreter."""
    value = tags.get("compute_capability", "none")
    if value == "none":
        return None
    major, minor = value.split(".")
    return int(major), int(minor)


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


def planned_device(cfg: DictConfig) -> str:
    """The device a sweep whose jobs run elsewhere (a SLURM cluster) is for, decided without looking at this
    machine's GPUs: the submitting process may have none. 'interpreter' when asked for (device=interpreter, or
    TRITON_INTERPRET=1, which the jobs inherit), else 'cuda'. Each job then resolves it on its own node
    (sweep_device_for_job)."""
    choice = enum_value(cfg.device)
    if choice == INTERPRETER or (choice == "auto" and os.environ.get("TRITON_INTERPRET") == "1"):
        return INTERPRETER
    return "cuda"


def sweep_device_for_job(planned: str) -> str:
    """A sweep job's device: the one its sweep was started for, checked on this node, so that a job never
    drifts to the interpreter (and into a GPU sweep's experiment) because its node shows no GPU."""
    import socket

    try:
        return resolve_device(planned)
    except ConfigError as e:
        seen = os.environ.get("CUDA_VISIBLE_DEVICES")
        raise ConfigError("device", planned, f"{e.allowed.split(': ', 1)[-1]} in this job (host "
                          f"{socket.gethostname()}, CUDA_VISIBLE_DEVICES={'unset' if seen is None else repr(seen)}), "
                          f"and the sweep was started for {planned}: run its jobs where a GPU is (a GPU partition, "
                          "hydra.launcher.gpus_per_node=1) or sweep with device=interpreter") from None


def check_device(cfg: DictConfig, device: str) -> None:
    if device == INTERPRETER and cfg.requires_gpu:
        raise ConfigError("requires_gpu", True, "a CUDA device: this preset compares with cuDNN or times the GPU "
                                                "itself, and none is visible here")


