"""Which compiler stage makes the GPU-only wrong results? Re-runs known wrong cases (JSONL from
`python -m convtune.verify --out`) with parts of Triton's pipeline switched off, one subprocess per setting so
that each compiles afresh: `base` (Triton's own O3 for our kernels); `ptxas_O0` (DISABLE_PTXAS_OPT=1);
`llvm_O0`..`llvm_O2` (convtune.kernels.llvm_opt's level); `both`. A case that turns right when a stage is
off points at that stage.

    python benchmarks/bisect_wrong.py tests/data/gpu_wrong_cases.jsonl [--settings base,ptxas_O0]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

SETTINGS = {"base": {"CONVTUNE_LLVM_OPT": "O3"}, "ptxas_O0": {"CONVTUNE_LLVM_OPT": "O3", "DISABLE_PTXAS_OPT": "1"},
            **{f"llvm_O{i}": {"CONVTUNE_LLVM_OPT": f"O{i}"} for i in range(3)},
            "both": {"DISABLE_PTXAS_OPT": "1", "CONVTUNE_LLVM_OPT": "O0"}}


def child(path: str) -> None:
    from convtune.verify import Case, run_case
    import dataclasses

    fields = {f.name for f in dataclasses.fields(Case)}
    seen = set()
    for line in open(path):
        raw = json.loads(line)
        c = Case(**{k: (tuple(v) if isinstance(v, list) else v) for k, v in raw.items() if k in fields})
        if c.label() in seen:
            continue
        seen.add(c.label())
        r = run_case(c, "cuda")
        print(json.dumps({"case": c.label(), "outcome": r["outcome"], "rel_err": r.get("rel_err")}), flush=True)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("cases")
    ap.add_argument("--settings", default=",".join(SETTINGS))
    ap.add_argument("--child", action="store_true")
    args = ap.parse_args()
    if args.child:
        child(args.cases)
        return 0
    table: dict[str, dict[str, str]] = {}
    for name in args.settings.split(","):
        env = {**os.environ, **SETTINGS[name], "TRITON_CACHE_DIR": tempfile.mkdtemp(prefix=f"bisect-{name}-")}
        out = subprocess.run([sys.executable, __file__, args.cases, "--child"], env=env, capture_output=True, text=True)
        if out.returncode:
            print(f"{name}: child failed\n{out.stderr[-3000:]}")
        for line in out.stdout.splitlines():
            r = json.loads(line)
            err = r["rel_err"]
            table.setdefault(r["case"], {})[name] = f"{r['outcome']}({err:.2g})" if err is not None else r["outcome"]
    names = args.settings.split(",")
    for case, row in table.items():
        print(f"{case[:95]:95} | " + " | ".join(f"{n} {row.get(n, '-')}" for n in names))
    for n in names:
        right = sum(1 for row in table.values() if row.get(n, "").startswith(("ok", "torch_mismatch", "cudnn")))
        print(f"{n}: {right} of {len(table)} right")
    return 0


if __name__ == "__main__":
    sys.exit(main())
