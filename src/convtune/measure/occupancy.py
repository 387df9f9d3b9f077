"""Theoretical occupancy: how many blocks of a compiled kernel fit on one SM, and which resource limits it.
Pure arithmetic on the kernel's registers per thread, shared memory per block and warps per block."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SmLimits:
    """Per-SM limits. Defaults are compute capability 9.0 (H100/H200); read real ones off the device."""

    regs_per_sm: int = 65536
    max_warps_per_sm: int = 64
    max_blocks_per_sm: int = 32
    smem_per_sm: int = 233472  # 228 KiB
    smem_reserved_per_block: int = 1024  # the runtime's own share of each block's shared memory (sm_80+)
    reg_alloc_unit: int = 256  # registers are given to warps in units of 256


# Compute capability 8.9 (the brief's RTX 4090): 48 warps and 100 KiB of shared memory per SM.
ADA = SmLimits(max_warps_per_sm=48, max_blocks_per_sm=24, smem_per_sm=102400)
HOPPER = SmLimits()


@dataclass(frozen=True)
class Occupancy:
    blocks_per_sm: int
    warps_per_sm: int
    fraction: float  # resident warps / max warps
    limiter: str  # registers | shared_memory | warps | blocks


def occupancy(regs_per_thread: int, smem_per_block: int, num_warps: int, sm: SmLimits = HOPPER) -> Occupancy:
    regs_per_warp = -(-max(regs_per_thread, 1) * 32 // sm.reg_alloc_unit) * sm.reg_alloc_unit
    limits = {
        "registers": sm.regs_per_sm // (regs_per_warp * num_warps),
        "shared_memory": sm.smem_per_sm // (smem_per_block + sm.smem_reserved_per_block) if smem_per_block else 10**9,
        "warps": sm.max_warps_per_sm // num_warps,
        "blocks": sm.max_blocks_per_sm,
    }
    limiter = min(limits, key=lambda k: limits[k])
    blocks = limits[limiter]
    return Occupancy(blocks, blocks * num_warps, blocks * num_warps / sm.max_warps_per_sm, limiter)


def warps_to_try(num_warps: int, occ: Occupancy) -> list[int]:
    """The micro-tune rule for num_warps (within {2, 4, 8, 16}): at low occupancy (< 25 % of the SM's warps)
    caused by registers, try twice the warps (the same tile over more threads needs fewer registers each);
    at high occupancy (>= 50 %), try half (more registers per thread, still enough warps to hide latency);
    otherwise, and when shared memory limits, num_warps is left alone."""
    if occ.fraction < 0.25 and occ.limiter == "registers" and num_warps * 2 <= 16:
        return [num_warps * 2]
    if occ.fraction >= 0.5 and num_warps // 2 >= 2:
        return [num_warps // 2]
    return []
