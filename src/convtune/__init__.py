"""convtune: a config-driven experiment tracker for a Triton convolution kernel, and its kernel library.

Importing this package imports no kernel: `@triton.jit` decides at import time between compiled and
interpreted kernels, so `convtune.kernels` is imported only once TRITON_INTERPRET is settled.
"""

__version__ = "0.1.0"
