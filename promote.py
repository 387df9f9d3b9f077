"""Pin the true winner into the library's pins file, or keep the current pin and say why.

    python promote.py problem=kernelbench_l1_50         # contest: top-k logged runs vs the current pin
    python promote.py promote.min_gain=0.05 promote.top_k=5
    python promote.py export=kernelbench                # the pinned kernel in the brief's output format
"""

import sys
from pathlib import Path

from convtune import interrupts

interrupts.install()  # first: a Ctrl-C during the imports below is one line too

import hydra  # noqa: E402
from omegaconf import DictConfig  # noqa: E402

from convtune.config import exit_on_bad_yaml, register_configs  # noqa: E402
from convtune.config_keys import exit_on_unknown_keys  # noqa: E402

register_configs()


@hydra.main(version_base="1.3", config_path="conf", config_name="config")
def main(cfg: DictConfig) -> None:
    from convtune.tune.export import run_export
    from convtune.tune.promote import run_promote

    try:
        status = run_export(cfg) if cfg.export else run_promote(cfg)
    except ValueError as e:  # ConfigError, PinsError, UnsupportedProblem: one clear line, no traceback
        sys.exit(f"error: {e}")
    if status:
        sys.exit(status)


if __name__ == "__main__":
    exit_on_bad_yaml(Path(__file__).resolve().parent)
    exit_on_unknown_keys(sys.argv[1:])
    interrupts.main_then_exit(main)
