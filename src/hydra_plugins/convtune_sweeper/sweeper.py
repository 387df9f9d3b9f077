"""`hydra/sweeper=convtune`: Hydra's basic sweeper plus an explicit list of configurations.

The basic sweeper only sweeps Cartesian products (`num_warps=2,4,8 BLOCK_M=32,64`). Kernel tuning often
needs a hand-picked list instead, such as the brief's nine autotune configurations, which are no product.
`hydra.sweeper.configs` holds that list (each entry a mapping of overrides); every entry is combined with
every point of the usual product of `hydra.sweeper.params` and the command line. Where an entry and the
product set the same key, the product's value wins, so the command line can still pin one key.

No `from __future__ import annotations` here: Hydra's plugin scan executes this module without
registering it in sys.modules, and dataclasses then cannot resolve string annotations.
"""


import time
from dataclasses import dataclass
from typing import Any, Dict, List, Optional

from hydra.core.config_store import ConfigStore
from hydra.utils import get_method
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
from omegaconf import OmegaConf


@dataclass
class ConvtuneSweeperConf:
    _target_: str = "hydra_plugins.convtune_sweeper.sweeper.ConvtuneSweeper"
    max_batch_size: Optional[int] = None
    params: Optional[Dict[str, str]] = None
    configs: Optional[List[Dict[str, Any]]] = None
    # a function (dotted path) of the composed config that returns the configs list, called when the sweep
    # starts; for example convtune.tune.microtune.neighbour_configs (the pin and its micro-tune neighbours)
    configs_from: Optional[str] = None
    # a function (dotted path) called with (config, number of jobs) once the jobs are planned
    on_planned: Optional[str] = None


ConfigStore.instance().store(group="hydra/sweeper", name="convtune", node=ConvtuneSweeperConf, provider="convtune")


PROGRESS_FROM = 50  # jobs: a sweep this large says that it checks their configs, and how far it is
PROGRESS_S = 5.0
# The jobs (their override lists, as sets) whose configs this process has composed already, recorded by whoever checks a
# sweep's values before it starts (convtune.sweep.check_sweep_values): validate_batch_is_legal composes only the others.
COMPOSED: set = set()


def _key(override: str) -> str:
    return override.split("=", 1)[0].lstrip("+~")


def plan_jobs(params: Optional[Dict[str, str]], configs: Optional[List[Dict[str, Any]]],
              arguments: List[str]) -> List[List[str]]:
    """Every job's override list: (config list entries) × (product of params and arguments). An empty config list
    is refused (ValueError): it once ran the default configuration alone, as if no list had been given."""
    if configs is not None and len(configs) == 0:
        raise ValueError("hydra.sweeper.configs is an empty list: no configuration to run (leave the key out to "
                         "sweep the command line's values)")
    params_conf = [f"{k}={v}" for k, v in (params or {}).items()] + list(arguments)
    product = BasicSweeper.split_arguments(OverridesParser.create().parse_overrides(params_conf), None)[0]
    if not configs:
        return product
    jobs = []
    for entry in configs:
        entry = OmegaConf.to_container(entry) if not isinstance(entry, dict) else entry
        for point in product:
            taken = {_key(o) for o in point}
            jobs.append([f"{k}={v}" for k, v in entry.items() if k not in taken] + list(point))
    return jobs


class ConvtuneSweeper(BasicSweeper):
    """Knows nothing of convtune: what it derives or reports goes through the two configured functions."""

    def __init__(self, max_batch_size: Optional[int] = None, params: Optional[Dict[str, str]] = None,
                 configs: Optional[List[Dict[str, Any]]] = None, configs_from: Optional[str] = None,
                 on_planned: Optional[str] = None) -> None:
        super().__init__(max_batch_size=max_batch_size, params=params)
        self.configs = configs
        self.configs_from = configs_from
        self.on_planned = on_planned

    def sweep(self, arguments: List[str]) -> Any:
        if self.configs_from:
            self.configs = get_method(self.configs_from)(self.config)
        return super().sweep(arguments)

    def validate_batch_is_legal(self, batch: Any) -> None:
        """Hydra's check that every job's config composes (~0.05 s a job: 20 s for 400 jobs before the first starts),
        for the jobs not composed already (COMPOSED: each job of a one-key sweep, the diagonal of a product), with a
        line before it and its progress every PROGRESS_S seconds, so that a large sweep is not silent."""
        batch = [job for job in batch if frozenset(job) not in COMPOSED]
        if not batch:
            return
        if len(batch) < PROGRESS_FROM:
            return super().validate_batch_is_legal(batch)
        print(f"checking that the {len(batch)} jobs' configs compose before the first starts...", flush=True)
        last = time.monotonic()
        for i in range(0, len(batch), 25):
            super().validate_batch_is_legal(batch[i:i + 25])
            if time.monotonic() - last > PROGRESS_S:
                print(f"  {min(i + 25, len(batch))}/{len(batch)} checked", flush=True)
                last = time.monotonic()

    def split_arguments(self, overrides: Any, max_batch_size: Optional[int]) -> List[List[List[str]]]:  # type: ignore[override]
        # BasicSweeper.sweep has already parsed params + arguments into `overrides`; redo it from strings
        # through plan_jobs so that the callback's job count and this sweep share one definition.
        arguments = [o.input_line for o in overrides]
        jobs = plan_jobs(None, self.configs, arguments)
        if self.on_planned:
            get_method(self.on_planned)(self.config, len(jobs))
        if max_batch_size is None or max_batch_size == -1:
            return [jobs]
        return [jobs[i:i + max_batch_size] for i in range(0, len(jobs), max_batch_size)]
