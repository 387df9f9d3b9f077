"""What Hydra's launchers and the search sweeper run (src/hydra_plugins names these functions): every GPU of a host
(gpus, pool, job_process), a SLURM array (slurm), an Optuna study (search). Records through convtune.sweep_state."""
