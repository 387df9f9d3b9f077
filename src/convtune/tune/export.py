"""`python promote.py export=kernelbench`: the pinned kernel as one self-contained file in the brief's format:
imports → @triton.jit kernel(s) → wrappers (grid and launch, the pinned configuration baked in) →
`class ModelNew(nn.Module)` with the problem Model's constructor. Nothing else: no tests, no __main__.

Each exportable variant renders its own file (KernelVariant.export, in its module, with kernels/export_format.py):
its kernels and pure helpers copied from the library's source, so the file runs the library's code, and launch
wrappers with the pinned configuration baked in; off the GPU every exported file falls back to the model's own
convolution.
"""

from __future__ import annotations

from pathlib import Path

from omegaconf import DictConfig

from convtune.errors import UnsupportedProblem
from convtune.problem import ConvProblem
from convtune.resolve import resolve



def exportable() -> tuple[str, ...]:
    """The variants that declare a KernelBench export (KernelVariant.export)."""
    from convtune.kernels import VARIANTS

    return tuple(name for name, v in VARIANTS.items() if v.export is not None)


def render_kernelbench(p: ConvProblem, meta: "object", precision: str, provenance: str, kernel: str) -> str:
    from convtune.kernels import VARIANTS

    if kernel not in exportable():
        raise ValueError(f"kernel {kernel!r} is not exportable: {', '.join(map(repr, exportable()))}")
    return VARIANTS[kernel].export(p, meta.as_dict(), precision, provenance)  # type: ignore[attr-defined,misc]


def run_export(cfg: DictConfig) -> int:
    if cfg.export != "kernelbench":
        print(f"error: export={cfg.export!r} is not allowed: 'kernelbench'")
        return 1
    setup = resolve(cfg, swap_problem=False)  # the problem as named: writing the file runs no kernel
    setup.raise_error()
    if setup.kernel_name not in exportable():  # kernel=library resolves per problem (setup)
        runs = "" if setup.kernel_name == cfg.kernel.name else f" (runs {setup.kernel_name} for this problem)"
        print(f"error: kernel={cfg.kernel.name!r}{runs} is not exportable: {', '.join(map(repr, exportable()))}")
        return 1
    # the configured (pinned or default) configuration, as the library would run it
    p, meta, source, precision = setup.problem, setup.configured_meta, setup.configured_source, setup.precision
    refuses = setup.variant.refuses
    refused = refuses(p, meta, precision) if refuses is not None else None
    if not setup.variant.takes_dtype(p.dtype):
        refused = f"{setup.kernel_name} takes {' and '.join(setup.variant.dtypes)}, not {p.dtype}"
    if refused:
        print(f"error: {refused}: nothing exported")
        return 1
    try:
        text = render_kernelbench(p, meta, precision, f"{source}; {meta.short()}", setup.kernel_name)
    except UnsupportedProblem as e:  # an epilogue KernelBench's format or the variant's renderer does not take
        print(f"error: {e}: nothing exported")
        return 1
    out = Path(cfg.export_path) if cfg.export_path else setup.cwd / "exports" / f"{p.name}.py"
    out = out if out.is_absolute() else setup.cwd / out
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    print(f"wrote {out}: {p.name}, {setup.kernel_name} {meta.label()} ({source}), "
          + (f"precision {precision}" if p.dtype == "float32" else p.dtype))
    if setup.interpreted:
        print("not checked: no GPU here (on a GPU the file is checked as KernelBench checks it)")
        return 0
    from convtune.measure.kbcheck import check_file

    verdict = check_file(out, p)
    print(verdict.report())
    return 0 if verdict.correct else 1
