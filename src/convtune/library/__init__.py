"""The drop-in for torch: `convtune.conv2d` (functional) and `convtune.nn` (nn), over the kernels and their pins."""
