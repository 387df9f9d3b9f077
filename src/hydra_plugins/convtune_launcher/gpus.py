"""`hydra/launcher=gpus`: a sweep's jobs on every GPU of this host, each job in a process of its own.

    python run.py -m hydra/launcher=gpus num_warps=2,4,8 BLOCK_M=64,128
    python run.py -m hydra/launcher=gpus hydra.launcher.gpus=[0,2] hydra.launcher.timeout_s=300 ...

One job at a time per GPU (`CUDA_VISIBLE_DEVICES` set for its process before CUDA starts), so no two timings
share a GPU. A job that hangs past `timeout_s`, or whose process dies (a crash, a sticky CUDA error), becomes
a FAILED run with the reason, its GPU takes the next job in a fresh process, and the sweep goes on. Without a
GPU, jobs run one at a time. The work is done by the function `hydra.launcher.launch_with` names
(convtune.launch.gpus.launch): Hydra's plugin scan imports this module for every Hydra app, so it imports
nothing of convtune (tests/test_import_walls.py).

No `from __future__ import annotations` here: Hydra's plugin scan executes this module without registering it
in sys.modules, and dataclasses then cannot resolve string annotations.
"""

from dataclasses import dataclass
from typing import Any, List, Optional, Sequence

from hydra.core.config_store import ConfigStore
from hydra.core.utils import JobReturn
from hydra.plugins.launcher import Launcher
from hydra.utils import get_method
from omegaconf import DictConfig


@dataclass
class GpusLauncherConf:
    _target_: str = "hydra_plugins.convtune_launcher.gpus.GpusLauncher"
    gpus: Optional[List[str]] = None  # CUDA_VISIBLE_DEVICES value per slot; null: every visible GPU
    timeout_s: float = 600.0  # a job with no result after this long is killed and recorded FAILED (Timeout)
    launch_with: str = "convtune.launch.gpus.launch"  # called with (launcher, job_overrides, initial_job_idx)


ConfigStore.instance().store(group="hydra/launcher", name="gpus", node=GpusLauncherConf, provider="convtune")


class GpusLauncher(Launcher):
    def __init__(self, gpus: Optional[List[Any]] = None, timeout_s: float = 600.0,
                 launch_with: str = "convtune.launch.gpus.launch") -> None:
        self.gpus = None if gpus is None else [str(g) for g in gpus]
        self.timeout_s = float(timeout_s)
        self.launch_with = launch_with
        self.config: Optional[DictConfig] = None
        self.hydra_context: Any = None
        self.task_function: Any = None

    def setup(self, *, hydra_context: Any, task_function: Any, config: DictConfig) -> None:
        self.config, self.hydra_context, self.task_function = config, hydra_context, task_function

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        return get_method(self.launch_with)(self, job_overrides, initial_job_idx)
