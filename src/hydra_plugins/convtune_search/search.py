"""`hydra/sweeper=search`: a search over the sweep's values instead of their whole grid (Optuna, ask/tell).

    python run.py -m hydra/sweeper=search hydra.sweeper.n_trials=50 BLOCK_M=32,64,128 BLOCK_N=32,64,128 \\
        BLOCK_K=16,32,64 num_warps=2,4,8 num_stages=2,3,4,5

Each key given several values (`k=a,b,c` or `k=range(...)`) is a dimension of the search; single values hold for
every trial. `n_trials` is the budget: how many distinct configurations are run. The study lives in `storage`
under `study_name` (by default named after the command's overrides), so the same command run again resumes it.
The work is done by the function `search_with` names (convtune.launch.search.sweep): Hydra's plugin scan imports this
module for every Hydra app, so it imports neither convtune nor Optuna (tests/test_import_walls.py).

No `from __future__ import annotations` here: Hydra's plugin scan executes this module without registering it
in sys.modules, and dataclasses then cannot resolve string annotations.
"""

from dataclasses import dataclass
from typing import Any, Dict, List, Optional

from hydra.core.config_store import ConfigStore
from hydra.plugins.sweeper import Sweeper
from hydra.utils import get_method
from omegaconf import DictConfig


@dataclass
class SearchSweeperConf:
    _target_: str = "hydra_plugins.convtune_search.search.SearchSweeper"
    n_trials: int = 20  # distinct configurations to run (the study's total, over every sweep that resumes it)
    batch_size: int = 1  # configurations asked for and launched together (as many as the launcher runs at once)
    sampler: str = "tpe"  # tpe | random
    seed: int = 0
    startup_trials: int = 10  # TPE: random configurations before it models the results
    storage: str = "sqlite:///mlruns/optuna.db"  # a relative SQLite path is taken from where run.py was started
    study_name: Optional[str] = None  # null: named after the command's overrides (same command, same study)
    params: Optional[Dict[str, str]] = None  # more overrides, as hydra.sweeper.params of the basic sweeper
    search_with: str = "convtune.launch.search.sweep"  # called with (sweeper, arguments)
    on_planned: Optional[str] = "convtune.sweep.record_total_jobs"  # called with (config, jobs this sweep)


ConfigStore.instance().store(group="hydra/sweeper", name="search", node=SearchSweeperConf, provider="convtune")


class SearchSweeper(Sweeper):
    def __init__(self, n_trials: int = 20, batch_size: int = 1, sampler: str = "tpe", seed: int = 0,
                 startup_trials: int = 10, storage: str = "sqlite:///mlruns/optuna.db",
                 study_name: Optional[str] = None, params: Optional[Dict[str, str]] = None,
                 search_with: str = "convtune.launch.search.sweep",
                 on_planned: Optional[str] = "convtune.sweep.record_total_jobs") -> None:
        self.n_trials, self.batch_size, self.sampler, self.seed = n_trials, batch_size, sampler, seed
        self.startup_trials, self.storage, self.study_name = startup_trials, storage, study_name
        self.params = dict(params or {})
        self.search_with, self.on_planned = search_with, on_planned
        self.config: Optional[DictConfig] = None
        self.hydra_context: Any = None
        self.launcher: Any = None

    def setup(self, *, hydra_context: Any, task_function: Any, config: DictConfig) -> None:
        from hydra.core.plugins import Plugins

        self.config, self.hydra_context = config, hydra_context
        self.launcher = Plugins.instance().instantiate_launcher(hydra_context=hydra_context,
                                                                task_function=task_function, config=config)

    def sweep(self, arguments: List[str]) -> Any:
        return get_method(self.search_with)(self, arguments)
