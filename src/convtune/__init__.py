"""convtune: a config-driven experiment tracker for a Triton convolution kernel, and its kernel library.

Importing this package imports no kernel: `@triton.jit` decides at import time between compiled and
interpreted kernels, so `convtune.kernels` is imported only once TRITON_INTERPRET is settled.
"""

__version__ = "0.1.0"

__all__ = ["conv2d", "nn", "tune_on_first_use"]


def __getattr__(name: str):  # lazy, so that importing convtune decides nothing about the interpreter
    if name == "conv2d":
        from convtune.library.functional import conv2d

        return conv2d
    if name == "tune_on_first_use":  # as torch.backends.cudnn.benchmark: convtune.tune_on_first_use(True)
        from convtune.library.dispatch import tune_on_first_use

        return tune_on_first_use
    if name == "nn":
        import convtune.library.nn as nn

        return nn
    raise AttributeError(f"module 'convtune' has no attribute {name!r}")
