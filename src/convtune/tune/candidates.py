"""A sweep of what could run a shape that no measurement covers yet (`+experiment=candidates`): each library kernel
that runs on this GPU and takes the shape, at its default and at its default's num_stages neighbours (within its
Space), the same list as tuning on first use tries (library/first_use.candidates). Promote follows the
sweep and contests the runs against torch, which the library runs for a key with no pin. tune_model.py runs it for
every distinct convolution of a model.
"""

from __future__ import annotations

from omegaconf import DictConfig

from convtune.device import capability_of
from convtune.resolve import resolve

LIMIT = 8  # configurations a shape, as many as a first-use contest tries: on the H200 a shape's sweep and promote
# then took 15-26 s (tune_model.py on AlexNet, VGG16 and ResNet-50; docs/PERFORMANCE.md)


def candidate_configs(config: DictConfig) -> list[dict[str, object]]:
    """The sweep's configuration list (hydra.sweeper.configs_from): one entry a (kernel, configuration)."""
    setup = resolve(config)  # first: it settles whether the kernels load compiled or interpreted
    setup.raise_error()
    from convtune.library.first_use import candidates

    found = candidates(setup.problem, setup.precision, capability_of(setup.device_tags), LIMIT)
    if not found:
        from convtune.errors import ConfigError

        raise ConfigError("problem", setup.problem.name, "a shape that some library kernel takes on this device "
                          "(every one refuses it here: the library runs torch for it)")
    kernels = sorted({c.kernel for c in found})
    print(f"candidates for {setup.problem.name} on {setup.gpu}: {len(found)} configs of {', '.join(kernels)}",
          flush=True)
    return [{"kernel": c.kernel, **c.meta.as_dict()} for c in found]
