"""Small models for tune_model.py's tests, importable as tests.tiny_models:<factory> from the project root."""

import torch


def two_shapes() -> torch.nn.Module:
    """Three convolutions of two distinct shapes (the last two alike), small enough for Triton's interpreter."""
    return torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3, padding=1), torch.nn.ReLU(),
                               torch.nn.Conv2d(4, 4, 3, padding=1), torch.nn.ReLU(),
                               torch.nn.Conv2d(4, 4, 3, padding=1))
