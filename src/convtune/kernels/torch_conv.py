"""torch's own convolution (cuDNN on a GPU) as one more way to run a problem: what the library runs where a pin
says `torch`, and the torch contender in promote's contest. Same precision as convtune's: TF32 exactly where
the convtune precision means torch's TF32 setting (kernels.precision.torch_uses_tf32)."""

from __future__ import annotations

from typing import Any, Optional

import torch
import torch.nn.functional as F

from convtune.kernels.precision import torch_uses_tf32

# torch.backends.cudnn.allow_tf32 goes through a context-property object (1.3 us a read on this machine);
# the C getter behind it costs ~0.1 us. Fall back to the public flag if a torch build lacks the getter.
cudnn_allows_tf32 = getattr(torch._C, "_get_cudnn_allow_tf32", lambda: torch.backends.cudnn.allow_tf32)


def conv2d(x: torch.Tensor, w: torch.Tensor, b: Optional[torch.Tensor], stride: Any, padding: Any, dilation: Any,
           precision: Optional[str], groups: int = 1) -> torch.Tensor:
    """torch.nn.functional.conv2d at `precision` (None: torch's own setting). torch's own settings (benchmark,
    deterministic) stay as the user set them; only allow_tf32 is switched, for this call, where it disagrees with
    `precision`."""
    tf32 = cudnn_allows_tf32() if precision is None else torch_uses_tf32(precision)
    if x.dtype is not torch.float32 or tf32 == cudnn_allows_tf32():  # TF32 is float32's math only
        return F.conv2d(x, w, b, stride, padding, dilation, groups)
    saved = torch.backends.cudnn.allow_tf32
    torch.backends.cudnn.allow_tf32 = tf32
    try:
        return F.conv2d(x, w, b, stride, padding, dilation, groups)
    finally:
        torch.backends.cudnn.allow_tf32 = saved
