"""`hydra/launcher=slurm`: a sweep's jobs as one SLURM array, one task and one GPU per configuration, through
submitit (hydra-submitit-launcher's keys: partition, account, timeout_min, gres, setup, array_parallelism, ...).
`hydra/launcher=slurm_local`: the same jobs through submitit's local executor, as processes of this machine,
`hydra.launcher.parallelism` at a time (1: no two timings share a GPU).

    python run.py -m hydra/launcher=slurm hydra.launcher.partition=gpu BLOCK_M=64,128 num_warps=4,8
    python run.py -m hydra/launcher=slurm hydra.launcher.dry_run=true ...   # print the batch script only

The submitting process needs no GPU. The work is done by the functions `launch_with` (in the submitting
process) and `run_with` (in each job) name, in convtune.launch.slurm: Hydra's plugin scan imports this module
for every Hydra app, so it imports nothing of convtune (tests/test_import_walls.py).

No `from __future__ import annotations` here: Hydra's plugin scan executes this module without registering it
in sys.modules, and dataclasses then cannot resolve string annotations.
"""

from dataclasses import dataclass
from typing import Any, Optional, Sequence

from hydra.core.config_store import ConfigStore
from hydra.core.utils import JobReturn
from hydra.utils import get_method
from hydra_plugins.hydra_submitit_launcher.config import LocalQueueConf, SlurmQueueConf
from hydra_plugins.hydra_submitit_launcher.submitit_launcher import BaseSubmititLauncher

OWN_DEFAULTS = {"dry_run": False, "parallelism": 1, "launch_with": "convtune.launch.slurm.launch",
                "run_with": "convtune.launch.slurm.run_one"}  # our keys, not submitit's (each conf has some)


@dataclass
class SlurmConf(SlurmQueueConf):
    _target_: str = "hydra_plugins.convtune_launcher.slurm.SlurmLauncher"
    name: str = "convtune"
    gpus_per_node: Optional[int] = 1  # one GPU per array task: no two timings share a GPU
    tasks_per_node: int = 1
    timeout_min: int = 20  # per configuration (compile, check, time: about a minute on L1 #50 on an H200)
    dry_run: bool = False  # write and print the batch script; submit nothing, record nothing
    launch_with: str = "convtune.launch.slurm.launch"
    run_with: str = "convtune.launch.slurm.run_one"


@dataclass
class SlurmLocalConf(LocalQueueConf):
    _target_: str = "hydra_plugins.convtune_launcher.slurm.SlurmLocalLauncher"
    name: str = "convtune"
    gpus_per_node: Optional[int] = 1  # submitit's local executor shows every job GPU 0 (CUDA_VISIBLE_DEVICES)
    timeout_min: int = 20
    parallelism: int = 1  # jobs at once: 1, since every job sees the same GPU
    launch_with: str = "convtune.launch.slurm.launch"
    run_with: str = "convtune.launch.slurm.run_one"


ConfigStore.instance().store(group="hydra/launcher", name="slurm", node=SlurmConf, provider="convtune")
ConfigStore.instance().store(group="hydra/launcher", name="slurm_local", node=SlurmLocalConf, provider="convtune")


class SlurmLauncher(BaseSubmititLauncher):
    executor = "slurm"

    def __init__(self, **params: Any) -> None:
        own = {k: params.pop(k, default) for k, default in OWN_DEFAULTS.items()}
        super().__init__(**params)
        self.dry_run, self.launch_with, self.run_with = bool(own["dry_run"]), own["launch_with"], own["run_with"]
        self.parallelism = own["parallelism"]  # SLURM's array is throttled by array_parallelism instead

    def __call__(self, *args: Any) -> JobReturn:  # in the job's process
        return get_method(self.run_with)(self, *args)

    def checkpoint(self, *args: Any, **kwargs: Any) -> None:
        """No requeue on SLURM's time-out or preemption signal (hydra-submitit-launcher resubmits the job as it was):
        the task's run is closed FAILED with SLURM's state, and a rerun of the sweep measures it again (resume keeps
        what is done). A requeued task would measure its configuration a second time under a new run."""
        return None

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        return get_method(self.launch_with)(self, job_overrides, initial_job_idx)


class SlurmLocalLauncher(SlurmLauncher):
    executor = "local"
