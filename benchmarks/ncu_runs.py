"""Print the NCU counters of every run in a tracking store (the runs of `python run.py ... profile=ncu`): per run
the problem, layout, kernel, configuration, latency, registers, occupancy and each `ncu*` metric.

    python benchmarks/ncu_runs.py sqlite:////tmp/ncu13/mlflow.db
"""

import sys

from mlflow.tracking import MlflowClient


def main(uri: str) -> None:
    c = MlflowClient(uri)
    for e in c.search_experiments():
        for r in c.search_runs([e.experiment_id]):
            m, t, p = r.data.metrics, r.data.tags, r.data.params
            print(f"{p.get('problem')} {p.get('problem.layout')} {p.get('kernel')} {r.info.run_name} latency "
                  f"{m.get('latency_ms', 0):.4f} ms regs {m.get('registers')} occupancy {m.get('occupancy_pct')} "
                  f"({t.get('occupancy_limiter')}) llvm_opt {t.get('llvm_opt')} {t.get('ncu_status')}")
            for k in sorted(k for k in m if k.startswith("ncu")):
                print(f"    {k} = {m[k]:.4g}")


if __name__ == "__main__":
    main(sys.argv[1])
