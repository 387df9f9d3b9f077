"""Sweep the conv kernel from Hydra configs; one MLflow run per configuration.

    python run.py                                   # one run of the default problem and configuration
    python run.py -m num_warps=2,4,8 BLOCK_M=32,64  # a sweep: one parent run, one child run per config
    python run.py +experiment=seed_configs          # a named preset from experiments/
"""

import sys
from pathlib import Path

from convtune import interrupts

interrupts.install()  # first: a Ctrl-C during the imports below is one line too

import hydra  # noqa: E402
from omegaconf import DictConfig  # noqa: E402

from convtune.app import run_job  # noqa: E402
from convtune.config import exit_on_bad_yaml, register_configs  # noqa: E402
from convtune.config_keys import exit_on_unknown_keys  # noqa: E402

register_configs()


@hydra.main(version_base="1.3", config_path="conf", config_name="config")
def main(cfg: DictConfig) -> object:
    try:
        return run_job(cfg)
    except ValueError as e:  # StoreError (the tracking store cannot be used): one clear line, no traceback
        sys.exit(f"error: {e}")


if __name__ == "__main__":
    exit_on_bad_yaml(Path(__file__).resolve().parent)
    exit_on_unknown_keys(sys.argv[1:])
    interrupts.main_then_exit(main)
