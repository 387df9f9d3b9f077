"""nhwc_tma's family for verify (`python -m convtune.commands.verify --variants nhwc_tma`): the cases it draws."""

from __future__ import annotations

import random
from typing import Any

from convtune.kernels.base import log_uniform_int
from convtune.kernels.conv_args import out_size


def draw_case(rng: random.Random, small: bool) -> dict[str, Any]:
    """verify's case draw: a case in nhwc_tma's family (make_plan): stride 1, input channels a multiple of 8 (either
    dtype), kernels 1-7 with padding up to half of them and dilation 1-2, inputs of 1-60 rows by 1-300 columns (3-12
    by 8-20 when small), batch 1-4; the default configuration or a random one."""
    while True:
        kh, kw = rng.randint(1, 7), rng.randint(1, 7)
        ph, pw = rng.randint(0, kh // 2), rng.randint(0, kw // 2)
        dh, dw = rng.choice([1, 1, 2]), rng.choice([1, 1, 2])
        h = rng.randint(3, 12) if small else rng.randint(1, 60)
        w = rng.randint(8, 20) if small else rng.randint(1, 300)
        if out_size(h, kh, 1, ph, dh) >= 1 and out_size(w, kw, 1, pw, dw) >= 1:
            break
    c = 8 * (rng.randint(1, 3) if small else log_uniform_int(rng, 1, 32))
    meta = None if rng.random() < 0.4 else dict(
        BLOCK_M=64 if small else rng.choice([64, 128, 256]), BLOCK_N=64 if small else rng.choice([64, 128]),
        BLOCK_K=rng.choice([16, 32]), num_warps=rng.choice([4, 8]), num_stages=rng.choice([2, 3, 4]))
    return dict(n=rng.randint(1, 2) if small else rng.choice([1, 2, 3, 4]), c=c, h=h, w=w,
                k=rng.randint(1, 40) if small else log_uniform_int(rng, 1, 256), kh=kh, kw=kw, stride=(1, 1),
                padding=(ph, pw), dilation=(dh, dw), bias=rng.random() < 0.7, offset=rng.choice([0, 0, 1, 2, 3]),
                init=rng.choice(["rand", "randn"]), meta=meta, seed=rng.randrange(2**31),
                layout=rng.choice(["nchw", "channels_last"]))
