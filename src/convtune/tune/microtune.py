"""The brief's micro-tuning stage as a sweep: the current pin (or default) and its neighbours only.

num_stages ±1 within {2, 3, 4} (or the next values of the variant's own, where its Space restricts them: a kernel's
warpgroups 1 and 2); num_warps changed only where the compiled pin's occupancy suggests it
(convtune.measure.occupancy.warps_to_try) and the variant takes it; blocks, and so the grid, unchanged. 1–4
configurations, the pin first.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from omegaconf import DictConfig

from convtune.problem import ConvProblem
from convtune.resolve import resolve

STAGES = (2, 3, 4)


def compiled_occupancy(problem: ConvProblem, meta: Any, precision: str, variant: Any) -> Any:
    """Compile and launch the pin once on this GPU to read its registers and shared memory."""
    import torch

    from convtune.measure.one_config import make_inputs, sm_limits
    from convtune.measure.occupancy import occupancy

    dev = torch.device("cuda")
    x, w, b = make_inputs(problem, 0, dev)
    launched = variant.launch(x, w, b, problem.stride, problem.padding, problem.dilation, meta, precision)
    return occupancy(launched.n_regs, launched.shared_bytes, meta.num_warps, sm_limits(dev)), launched


def neighbour_configs(config: DictConfig) -> list[dict[str, int]]:
    """The sweep's configuration list (hydra.sweeper.configs_from): the pin (or default) first, then neighbours."""
    setup = resolve(config)
    setup.raise_error()
    from convtune.measure.occupancy import warps_to_try

    problem, meta, source = setup.problem, setup.configured_meta, setup.configured_source
    space = setup.variant.space  # a variant that restricts a knob moves it within its own values
    stages = space.neighbours("num_stages", meta.num_stages, STAGES) if space else tuple(
        s for s in (meta.num_stages - 1, meta.num_stages + 1) if s in STAGES)
    configs = [meta] + [replace(meta, num_stages=s) for s in stages]
    if setup.interpreted:
        why = "num_warps kept: the interpreter compiles nothing, so there is no occupancy to read"
    else:
        occ, launched = compiled_occupancy(problem, meta, setup.precision, setup.variant)
        more = [w for w in warps_to_try(meta.num_warps, occ) if space is None or space.allows(replace(meta, num_warps=w))]
        configs += [replace(meta, num_warps=w) for w in more]
        why = (f"{launched.n_regs} registers/thread, {launched.shared_bytes} B shared/block → {occ.blocks_per_sm} "
               f"block(s), {occ.warps_per_sm} warps/SM ({occ.fraction:.0%}, limited by {occ.limiter}) → "
               + (f"num_warps {more}" if more else "num_warps kept"))
    print(f"micro-tune {problem.name} around {meta.short()} ({source}): {len(configs)} configs; {why}", flush=True)
    return [m.as_dict() for m in configs]
