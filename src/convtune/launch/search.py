"""What `hydra/sweeper=search` runs: an Optuna study over the sweep's values, asked and told in batches.

Each trial is one job through the configured launcher (basic, gpus, ...), so it is measured, checked and
recorded like any sweep job; its latency (ms) is the trial's value, and a configuration that fails or gives a
wrong result is a FAIL trial. No configuration is run twice: one the study already holds is answered from the
study (Optuna proposes repeats), and a job whose configuration the MLflow store already holds, measured alike,
reads that run back (`resume=true`, app.py). The study is stored (hydra.sweeper.storage) under a name made from
the command's overrides, so running the same command again resumes it; a trial an interrupt left open is run
again. The search ends after `n_trials` distinct configurations, or when the space has no configuration left.
"""

from __future__ import annotations

import itertools
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.utils import get_method
from omegaconf import DictConfig, OmegaConf

from convtune.errors import ConfigError

SAMPLERS = ("tpe", "random")
REPEATS_BEFORE_RANDOM = 20  # Optuna proposals in a row of configurations already run: then an unrun one at random


@dataclass(frozen=True)
class Space:
    """The search space from a sweep's overrides: each key swept over several values is a dimension."""
    fixed: tuple[str, ...]  # overrides every trial takes, as written
    choices: dict[str, tuple[str, ...]]  # key → its values, as written

    def size(self) -> int:
        n = 1
        for values in self.choices.values():
            n *= len(values)
        return n

    def overrides(self, params: dict[str, str]) -> list[str]:
        return list(self.fixed) + [f"{k}={params[k]}" for k in self.choices]

    def ordinal(self, key: str) -> bool:
        """Every value a number: the dimension is ordered (its values sorted), and the sampler may model
        neighbours as alike. On L1 #50's 216-configuration grid on 4 H200s with a budget of 54 runs, the first
        version (every value categorical, univariate TPE) came within 1 % of the grid's best for 2 of 5 seeds;
        this one (ordered, multivariate TPE) for 5 of 5 (runs 13-45), and for 20 of 20 seeds replayed on that
        grid's measurements (median 29; categorical but multivariate: 17 of 20)."""
        return all(_number(v) is not None for v in self.choices[key])

    def distributions(self) -> dict[str, Any]:
        from optuna.distributions import CategoricalDistribution, IntDistribution

        return {k: IntDistribution(0, len(v) - 1) if self.ordinal(k) else CategoricalDistribution(list(v))
                for k, v in self.choices.items()}

    def decode(self, params: dict[str, Any]) -> dict[str, str]:
        """A trial's params (an index for an ordered dimension) → the override values."""
        return {k: self.choices[k][params[k]] if self.ordinal(k) else params[k] for k in self.choices}

    def encode(self, values: dict[str, str]) -> dict[str, Any]:
        return {k: self.choices[k].index(values[k]) if self.ordinal(k) else values[k] for k in self.choices}

    def columns(self) -> list[list[str]]:
        """Jobs that together take every value of every dimension once (for composing each value up front)."""
        width = max((len(v) for v in self.choices.values()), default=0)
        return [list(self.fixed) + [f"{k}={v[i]}" for k, v in self.choices.items() if i < len(v)] for i in range(width)]


def parse_space(arguments: list[str], params: Optional[dict[str, str]] = None) -> Space:
    """`k=a,b,c`, `k=choice(a,b)` and `k=range(...)` are dimensions; anything else is fixed."""
    parsed = OverridesParser.create().parse_overrides([f"{k}={v}" for k, v in (params or {}).items()] + list(arguments))
    fixed: list[str] = []
    choices: dict[str, tuple[str, ...]] = {}
    for o in parsed:
        key = o.get_key_element()
        if not o.is_sweep_override():
            fixed.append(f"{key}={o.get_value_element_as_str()}")
        elif not o.is_discrete_sweep():
            raise ConfigError(key, o.input_line.split("=", 1)[-1],
                              "the search takes a list of values (a,b,c), choice(...) or range(...), not an interval")
        else:
            values = tuple(dict.fromkeys(o.sweep_string_iterator()))
            if all(_number(v) is not None for v in values):
                values = tuple(sorted(values, key=_number))  # type: ignore[arg-type]
            if len(values) == 1:
                fixed.append(f"{key}={values[0]}")
            else:
                choices[key] = values
    return Space(tuple(fixed), choices)


def _number(value: str) -> Optional[float]:
    try:
        return float(value)
    except ValueError:
        return None


def storage_url(storage: str, cwd: str) -> str:
    """A relative `sqlite:///path` made absolute against the folder run.py was started from, its folder created."""
    prefix = "sqlite:///"
    if storage.startswith(prefix) and not storage.startswith(prefix + "/"):
        path = Path(cwd) / storage[len(prefix):]
        path.parent.mkdir(parents=True, exist_ok=True)
        return prefix + str(path)
    return storage


def default_study_name(space: Space) -> str:
    return "search " + " ".join(list(space.fixed) + [f"{k}={','.join(v)}" for k, v in space.choices.items()])


def _key(params: dict[str, Any]) -> tuple[tuple[str, str], ...]:
    return tuple(sorted((k, str(v)) for k, v in params.items()))


def check_settings(settings: Any, arguments: list[str]) -> Space:
    """The search's keys (`settings`: the sweeper, or its config node) and space, refused in one line
    (ConfigError) before anything runs; the space."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    if settings.sampler not in SAMPLERS:
        raise ConfigError("hydra.sweeper.sampler", settings.sampler, " or ".join(SAMPLERS))
    for key, least in (("n_trials", 1), ("batch_size", 1), ("startup_trials", 0)):
        value = getattr(settings, key)
        if not (isinstance(value, int) and value >= least):
            raise ConfigError(f"hydra.sweeper.{key}", value, f"a whole number, at least {least}")
    try:
        make_url(settings.storage)
    except ArgumentError:
        raise ConfigError("hydra.sweeper.storage", settings.storage, "a database URL such as "
                          "sqlite:///mlruns/optuna.db or postgresql://user@host/db") from None
    space = parse_space(arguments, dict(settings.params) if settings.params else None)
    if not space.choices:
        raise ConfigError("hydra/sweeper", "search", "nothing to search: give at least one key several values "
                          "(num_warps=2,4,8)")
    return space


def make_sampler(name: str, seed: int, startup_trials: int) -> Any:
    """TPE, multivariate (it models the dimensions jointly: see Space.ordinal for what that bought), or random."""
    import warnings

    import optuna

    if name == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    with warnings.catch_warnings():  # multivariate TPE is marked experimental
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        return optuna.samplers.TPESampler(seed=seed, n_startup_trials=startup_trials, multivariate=True)


def sweep(sweeper: Any, arguments: list[str]) -> None:
    import optuna
    from optuna.trial import TrialState

    config: DictConfig = sweeper.config
    space = check_settings(sweeper, arguments)
    # (SweepCallback.on_multirun_start has composed every value of the space before the parent run existed)
    sweep_dir = Path(config.hydra.sweep.dir)
    sweep_dir.mkdir(parents=True, exist_ok=True)
    OmegaConf.save(config, sweep_dir / "multirun.yaml")  # as Hydra's basic sweeper does

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    sampler = make_sampler(sweeper.sampler, sweeper.seed, sweeper.startup_trials)
    url = storage_url(sweeper.storage, config.hydra.runtime.cwd)
    name = sweeper.study_name or default_study_name(space)
    study = optuna.create_study(storage=url, study_name=name, direction="minimize", sampler=sampler,
                                load_if_exists=True)
    distributions = space.distributions()

    outcome: dict[tuple, Optional[float]] = {}  # configurations run: latency, or None (failed)
    reopened = 0
    for t in study.get_trials(deepcopy=False):
        if t.state == TrialState.RUNNING:  # an interrupt left it open: close it and run it again
            study.tell(t.number, state=TrialState.FAIL)
            study.enqueue_trial(t.params)
            reopened += 1
        elif t.state in (TrialState.COMPLETE, TrialState.FAIL) and not t.user_attrs.get("repeat_of") \
                and set(t.params) == set(space.choices):
            outcome[_key(space.decode(t.params))] = t.value if t.state == TrialState.COMPLETE else None
    budget = min(sweeper.n_trials, space.size()) - len(outcome)
    if sweeper.on_planned:
        get_method(sweeper.on_planned)(config, max(budget, 0))
    print(f"search: study '{name}' ({url}): {len(outcome)} of {sweeper.n_trials} configurations run before"
          + (f", {reopened} left open by an interrupt run again" if reopened else "")
          + f"; {max(budget, 0)} to go, out of {space.size()} in the space", flush=True)

    rng = random.Random(sweeper.seed)
    job_idx = 0
    while budget > 0:
        batch: list[tuple[Any, tuple]] = []
        repeats: list[tuple[Any, tuple]] = []  # asked again while their configuration is in this batch
        in_a_row = 0
        while len(batch) < min(sweeper.batch_size, budget):
            trial = study.ask(distributions)
            key = _key(space.decode(trial.params))
            if key in outcome or any(key == k for _, k in batch):
                in_a_row += 1
                if key in outcome:
                    _tell_repeat(study, trial, outcome[key], TrialState)
                else:
                    repeats.append((trial, key))
                if in_a_row >= REPEATS_BEFORE_RANDOM:
                    unrun = _an_unrun_configuration(space, set(outcome) | {k for _, k in batch}, rng)
                    if unrun is None:
                        break
                    study.enqueue_trial(space.encode(unrun))
                    in_a_row = 0
                continue
            in_a_row = 0
            batch.append((trial, key))
        if not batch:
            break
        returns = sweeper.launcher.launch([space.overrides(space.decode(t.params)) for t, _ in batch], initial_job_idx=job_idx)
        for (trial, key), ret in zip(batch, returns):
            try:
                value = ret.return_value
            except BaseException:  # the task raised: the trial failed, and the sweep stops as Hydra's does
                study.tell(trial, state=TrialState.FAIL)
                raise
            if isinstance(value, (int, float)):
                study.tell(trial, float(value))
                outcome[key] = float(value)
            else:
                study.tell(trial, state=TrialState.FAIL)
                outcome[key] = None
        for trial, key in repeats:
            _tell_repeat(study, trial, outcome[key], TrialState)
        job_idx += len(batch)
        budget -= len(batch)
    _report(space, outcome, job_idx)


def _tell_repeat(study: Any, trial: Any, value: Optional[float], states: Any) -> None:
    """A proposal of a configuration already run: answered from its result, marked so it is not counted as run.
    Told FAIL, so the sampler does not weigh one measurement twice."""
    trial.set_user_attr("repeat_of", value if value is not None else "failed")
    study.tell(trial, state=states.FAIL)


def _an_unrun_configuration(space: Space, run: set, rng: random.Random) -> Optional[dict[str, str]]:
    keys = list(space.choices)
    for _ in range(1000):
        params = {k: rng.choice(space.choices[k]) for k in keys}
        if _key(params) not in run:
            return params
    left = [dict(zip(keys, p)) for p in itertools.product(*space.choices.values()) if _key(dict(zip(keys, p))) not in run]
    return rng.choice(left) if left else None


def _report(space: Space, outcome: dict, jobs: int) -> None:
    ok = {k: v for k, v in outcome.items() if v is not None}
    failed = len(outcome) - len(ok)
    line = f"search: {jobs} configuration(s) run by this sweep, {len(outcome)} in the study ({failed} failed)"
    if len(outcome) >= space.size():
        line += "; the space is exhausted"
    if ok:
        best = min(ok, key=ok.get)  # type: ignore[arg-type]
        line += f"; best {ok[best]:.4g} ms: " + " ".join(f"{k}={v}" for k, v in best)
    print(line, flush=True)
