"""Nsight Compute counters for one launch of the kernel of interest (`profile=ncu`).

The run is re-launched in a child process under `ncu` for exactly one launch of the conv kernel (matched
by name), separately from the timed launches, so profiling never touches the timing numbers.
"""

from __future__ import annotations

import csv
import glob
import io
import json
import os
import shutil
import subprocess
import sys
from typing import Optional

# The brief's five readings, plus DRAM traffic for the roofline's measured arithmetic intensity.
COUNTERS = (
    "sm__throughput.avg.pct_of_peak_sustained_elapsed",
    "sm__warps_active.avg.pct_of_peak_sustained_active",
    "dram__throughput.avg.pct_of_peak_sustained_elapsed",
    "lts__t_sector_hit_rate.pct",
    "launch__grid_size",
    "dram__bytes_read.sum",
    "dram__bytes_write.sum",
)
KERNEL_REGEX = "regex:_conv2d_.*_kernel"


def metric_name(counter: str) -> str:
    """The MLflow metric for a counter: 'ncu.' + the counter's own name (dots are legal in metric names)."""
    return f"ncu.{counter}"


def find_ncu() -> Optional[str]:
    found = shutil.which("ncu")
    if found:
        return found
    candidates = sorted(glob.glob("/opt/nvidia/nsight-compute/*/ncu") + glob.glob("/usr/local/cuda*/bin/ncu"))
    return candidates[-1] if candidates else None


def parse_csv(text: str) -> dict[str, float]:
    """Counter → value from `ncu --csv --print-units base` output (its ==PROF== lines are skipped)."""
    lines = [ln for ln in text.splitlines() if ln.startswith('"')]
    out: dict[str, float] = {}
    for row in csv.DictReader(io.StringIO("\n".join(lines))):
        name, value = row.get("Metric Name"), row.get("Metric Value", "")
        if name in COUNTERS:
            try:
                out[name] = float(value.replace(",", ""))
            except ValueError:
                continue
    return out


def profile_env(job: dict) -> dict[str, str]:
    """The profiled process's environment: compiled Triton, and the LLVM level the measured run's binary was
    compiled at, forced, so that its first launch is the profiled one. Left on `auto`, the first launch of a new
    binary is kernels/llvm_opt's one-time check on a single image, and `--launch-count 1` would profile that."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    if job.get("llvm_opt") in ("O0", "O1", "O2", "O3"):
        env["CONVTUNE_LLVM_OPT"] = job["llvm_opt"]
    return env


def profile(job: dict, timeout_s: float = 300) -> tuple[dict[str, float], str]:
    """Run `python -m convtune.commands.profile` under ncu for one kernel launch. Returns (counters, status line)."""
    exe = find_ncu()
    if exe is None:
        return {}, "ncu not found (not on PATH nor under /opt/nvidia/nsight-compute): no NCU counters"
    cmd = [exe, "--csv", "--print-units", "base", "--clock-control", "none", "--kernel-name", KERNEL_REGEX,
           "--launch-count", "1", "--metrics", ",".join(COUNTERS),
           sys.executable, "-m", "convtune.commands.profile", json.dumps(job)]
    env = profile_env(job)
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, env=env)
    except subprocess.TimeoutExpired:
        return {}, f"ncu timed out after {timeout_s:.0f} s: no NCU counters"
    counters = parse_csv(r.stdout)
    if r.returncode != 0 or not counters:
        why = (r.stderr.strip() or r.stdout.strip()).splitlines()
        return {}, f"ncu failed (exit {r.returncode}): {why[-1][:200] if why else 'no output'}"
    return counters, f"ncu: {len(counters)} counters from one launch"
