"""Measuring one configuration: inputs, the correctness judge, timing, derived metrics, occupancy, NCU.

Knows torch and the kernels; never imports MLflow or Hydra."""
