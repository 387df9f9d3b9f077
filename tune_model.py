"""Tune a whole model's convolutions in one command, and keep a shape's pin only where the model is faster with it.

    python tune_model.py model=resnet50 batch=32 layout=channels_last train=false
    python tune_model.py model=mypackage.nets:make_net input=[3,128,128] batch=64
    python tune_model.py model=resnet50 shapes=6 'sweep=["promote.rounds=7"]'  # the 6 shapes with the most FLOPs

Each shape is swept and promoted through the tracker (MLflow runs nested under the model's run; a rerun goes on
where it stopped), then the model is timed end to end against torch (convtune/tune/model.py says how).
"""

import sys
from pathlib import Path

from convtune import interrupts

interrupts.install()  # first: a Ctrl-C during the imports below is one line too

import hydra  # noqa: E402
from hydra.core.hydra_config import HydraConfig  # noqa: E402
from omegaconf import DictConfig  # noqa: E402

from convtune.config import TuneModelConfig, exit_on_bad_yaml, register_configs  # noqa: E402
from convtune.config_keys import exit_on_unknown_keys  # noqa: E402

register_configs()
ROOT = Path(__file__).resolve().parent


@hydra.main(version_base="1.3", config_path="conf", config_name="tune_model")
def main(cfg: DictConfig) -> None:
    from convtune.tune.model import run_tune_model

    try:
        status = run_tune_model(cfg, ROOT, Path(HydraConfig.get().runtime.output_dir))
    except ValueError as e:  # ConfigError, PinsError, StoreError: one clear line, no traceback
        sys.exit(f"error: {e}")
    if status:
        sys.exit(status)


if __name__ == "__main__":
    exit_on_bad_yaml(ROOT)
    exit_on_unknown_keys(sys.argv[1:], TuneModelConfig, groups=("tracking",))
    interrupts.main_then_exit(main)
