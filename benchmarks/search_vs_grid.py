"""The search sweeper against the grid on one store: the grid's best latency (every measured, correct run that
is not a read-back), and for each Optuna study (one per seed) the trial at which the search first reached a
configuration within 1 % of that best, and its best after its whole budget. With --replay N, also N seeds of
the search replayed on the grid's own measurements (no GPU: the sweeper's Space and sampler, told the latency
the grid measured), with every value categorical for comparison.

    python benchmarks/search_vs_grid.py --store sqlite:///... --storages sqlite:///... --studies seed0 ... [--replay 20]
"""
import argparse

import optuna
from mlflow.tracking import MlflowClient
from optuna.trial import TrialState

from convtune.launch.search import Space, make_sampler

KEYS = ("BLOCK_M", "BLOCK_N", "BLOCK_K", "num_warps", "num_stages")


def replay(grid: dict, target: float, seed: int, budget: int, categorical: bool) -> int | None:
    """Runs the search needs to reach `target` on the grid's measurements (None: not within `budget`)."""
    space = Space((), {k: tuple(sorted({c[i] for c in grid}, key=float)) for i, k in enumerate(KEYS)})
    dists = ({k: optuna.distributions.CategoricalDistribution(list(v)) for k, v in space.choices.items()}
             if categorical else space.distributions())
    study = optuna.create_study(sampler=make_sampler("tpe", seed, 10))
    seen: set = set()
    for _ in range(100 * budget):
        trial = study.ask(dists)
        values = trial.params if categorical else space.decode(trial.params)
        config = tuple(values[k] for k in KEYS)
        if config in seen:
            study.tell(trial, state=TrialState.FAIL)
            continue
        seen.add(config)
        latency = grid.get(config)
        study.tell(trial, latency) if latency is not None else study.tell(trial, state=TrialState.FAIL)
        if latency is not None and latency <= target:
            return len(seen)
        if len(seen) >= budget:
            return None
    return None


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--store", required=True)
    ap.add_argument("--storages", nargs="+", required=True, help="one Optuna storage URL per study, same order")
    ap.add_argument("--studies", nargs="+", required=True)
    ap.add_argument("--experiment", default="kernelbench_l1_50")
    ap.add_argument("--replay", type=int, default=0, help="seeds of the search replayed on the grid's measurements")
    a = ap.parse_args()
    client = MlflowClient(a.store)
    exp = client.get_experiment_by_name(a.experiment)
    runs = [r for r in client.search_runs([exp.experiment_id], max_results=5000)
            if "mlflow.parentRunId" in r.data.tags and not r.data.tags.get("resumed_from")]
    ok = [r for r in runs if r.data.tags.get("status") == "ok"]
    best = min(ok, key=lambda r: r.data.metrics["latency_ms"])
    configs = {tuple(r.data.params[k] for k in ("BLOCK_M", "BLOCK_N", "BLOCK_K", "num_warps", "num_stages")) for r in runs}
    target = 1.01 * best.data.metrics["latency_ms"]
    print(f"grid: {len(runs)} measured runs ({len(configs)} distinct configurations), {len(ok)} ok, "
          f"{len(runs) - len(ok)} failed or wrong; best {best.data.metrics['latency_ms']:.4f} ms "
          f"({best.info.run_name}); within 1 %: <= {target:.4f} ms, "
          f"{sum(r.data.metrics['latency_ms'] <= target for r in ok)} configuration(s)")
    quarter = len(configs) // 4
    for storage, name in zip(a.storages, a.studies):
        study = optuna.load_study(study_name=name, storage=storage)
        runs_in_order = [t for t in sorted(study.trials, key=lambda t: t.number)
                         if t.state in (TrialState.COMPLETE, TrialState.FAIL) and not t.user_attrs.get("repeat_of")]
        reached = next((i + 1 for i, t in enumerate(runs_in_order) if t.value is not None and t.value <= target), None)
        values = [t.value for t in runs_in_order if t.value is not None]
        print(f"study {name}: {len(runs_in_order)} configurations run ({sum(t.value is None for t in runs_in_order)} "
              f"failed); best {min(values):.4f} ms ({min(values) / best.data.metrics['latency_ms']:.4f}x the grid's); "
              f"first within 1 % at run {reached if reached else 'never'} (a quarter of the grid: {quarter})")
    if a.replay:
        replays(runs, target, a.replay, quarter)


def replays(runs: list, target: float, seeds: int, budget: int) -> None:
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    grid = {tuple(r.data.params[k] for k in KEYS): (r.data.metrics["latency_ms"] if r.data.tags.get("status") == "ok"
                                                    else None) for r in runs}
    for label, categorical in (("as the sweeper (ordered numbers, multivariate TPE)", False),
                               ("every value categorical", True)):
        got = [replay(grid, target, s, budget, categorical) for s in range(seeds)]
        hit = sorted(g for g in got if g is not None)
        print(f"replay, {label}: within 1 % in <= {budget} runs for {len(hit)} of {seeds} seeds"
              + (f"; runs needed median {hit[len(hit) // 2]}, max {hit[-1]}" if hit else "") + f" ({got})")


if __name__ == "__main__":
    main()

