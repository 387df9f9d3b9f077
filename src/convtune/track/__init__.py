"""Run records in MLflow: the store, the run record (names and typed views), the sweep summary and plots.

Knows MLflow and matplotlib; never imports torch, triton or Hydra."""
