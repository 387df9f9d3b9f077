"""Commands run as `python -m convtune.commands.<name>`: verify (GPU correctness on random shapes), calibrate (this
GPU's measured ceilings), profile (one launch for Nsight Compute)."""
