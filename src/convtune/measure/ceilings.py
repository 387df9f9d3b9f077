"""This GPU's measured ceilings (copy bandwidth, TF32 matmul rate), cached by `python -m convtune.commands.calibrate`
and read by every run for its floor and roofline (tag floor_source=measured)."""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path
from typing import Optional

from convtune.measure.metrics import GpuSpec

CACHE = Path(os.environ.get("CONVTUNE_CACHE", Path.home() / ".cache" / "convtune")) / "ceilings.json"


def load_cache(path: Path = CACHE) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def apply_cache(spec: Optional[GpuSpec], device_name: str, path: Path = CACHE) -> Optional[GpuSpec]:
    """The spec with this GPU's cached measured ceilings, where `calibrate` has measured them."""
    got = load_cache(path).get(device_name)
    if spec is None or not got:
        return spec
    return replace(spec, measured_tf32_tflops=got["tf32_tflops"], measured_copy_gbps=got["copy_gbps"],
                   measured_half_tflops=got.get("bf16_tflops", spec.measured_half_tflops))
