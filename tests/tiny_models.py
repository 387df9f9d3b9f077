"""Small models for tune_model.py's tests, importable as tests.tiny_models:<factory> from the project root."""

import torch


def two_shapes() -> torch.nn.Module:
    """Three convolutions of two distinct shapes (the last two alike), small enough for Triton's interpreter."""
    return torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3, padding=1), torch.nn.ReLU(),
                               torch.nn.Conv2d(4, 4, 3, padding=1), torch.nn.ReLU(),
                               torch.nn.Conv2d(4, 4, 3, padding=1))


def raises() -> torch.nn.Module:
    """A factory that fails as it builds (tune_model.py says so in one line)."""
    raise RuntimeError("no weights here")


def not_a_module() -> dict:
    """A factory that returns something other than a model."""
    return {"conv": torch.nn.Conv2d(3, 4, 3)}
