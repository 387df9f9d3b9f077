"""`python -m convtune.commands.calibrate`: measure this GPU's ceilings once and cache them for the floor and roofline.

Copy bandwidth: a 2 GiB device-to-device copy, counting bytes read + written. Matrix rates: 8192³ products
through torch (TF32 with allow_tf32 on; bf16), on random data. Each is the median of do_bench-style
event timings with the L2 flushed. The cache is JSON keyed by GPU name; runs then use these measured
ceilings for `floor_ms`/`pct_of_floor` (tag floor_source=measured) while pct_peak_* stays datasheet-based.
"""

from __future__ import annotations

import json
import sys

from convtune.measure.ceilings import CACHE, load_cache


def _copy_ms(dev: "object", s: "object") -> float:
    """Median time of a 2 GiB device-to-device copy (the buffers are freed on return)."""
    import torch

    from convtune.measure import bench

    src = torch.rand(2**29, device=dev)  # 2 GiB of fp32
    dst = torch.empty_like(src)
    return bench.time_gpu(lambda: dst.copy_(src), s, dev).median_ms


def measure() -> dict[str, float]:
    import torch

    from convtune.measure import bench
    from convtune.measure.bench import TimingSettings

    dev = torch.device("cuda")
    s = TimingSettings(rounds=3, reps=10, warmup=3)
    out = {"copy_gbps": 2 * 2**31 / _copy_ms(dev, s) / 1e6}
    n = 8192
    saved = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = True
    try:
        for name, dtype in (("tf32_tflops", torch.float32), ("bf16_tflops", torch.bfloat16)):
            a, b = torch.randn(n, n, device=dev, dtype=dtype), torch.randn(n, n, device=dev, dtype=dtype)
            out[name] = 2 * n**3 / bench.time_gpu(lambda: a @ b, s, dev).median_ms / 1e9
    finally:
        torch.backends.cuda.matmul.allow_tf32 = saved
    return out


def main() -> None:
    import torch

    if not torch.cuda.is_available():
        sys.exit("error: python -m convtune.commands.calibrate measures a GPU's ceilings, and no CUDA device is visible here")
    name = torch.cuda.get_device_name()
    got = measure()
    cache = load_cache()
    cache[name] = {k: round(v, 1) for k, v in got.items()}
    CACHE.parent.mkdir(parents=True, exist_ok=True)
    CACHE.write_text(json.dumps(cache, indent=1, sort_keys=True))
    print(f"{name}: copy {got['copy_gbps']:.0f} GB/s, TF32 {got['tf32_tflops']:.0f} TFLOP/s, "
          f"bf16 {got['bf16_tflops']:.0f} TFLOP/s → {CACHE}")


if __name__ == "__main__":
    main()
