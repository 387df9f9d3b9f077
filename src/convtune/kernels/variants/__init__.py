"""The kernel variants: one module each (plus a `*_kernel.py` where its jit code is imported on first launch), each
ending with `register(KernelVariant(...))`. Importing `convtune.kernels` imports them all; nothing else names them."""
