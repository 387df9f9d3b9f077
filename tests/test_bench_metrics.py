"""Timing statistics, the correctness check, and the performance arithmetic."""

import math
import time

import pytest
import torch

from convtune.measure import bench
from convtune.measure.bench import Timing, TimingSettings
from convtune.measure.metrics import GPU_SPECS, floor_ms, gpu_spec, performance
from convtune.problem import ConvProblem

L1_50 = ConvProblem("kernelbench_l1_50", 256, 3, 224, 224, 96, 11, 11, (4, 4), (2, 2))


def test_timing_statistics():
    t = Timing(samples_ms=(1.0, 2.0, 3.0, 4.0, 5.0), round_medians_ms=(2.0, 4.0))
    assert t.median_ms == 3.0
    assert t.quantile_ms(0.2) == pytest.approx(1.8) and t.quantile_ms(0.8) == pytest.approx(4.2)
    assert t.cv == pytest.approx(1.0 / 3.0)  # pstdev(2,4)=1, mean 3
    assert set(t.metrics()) == {"latency_ms", "latency_p20_ms", "latency_p80_ms", "latency_cv"}


def test_host_timing_calls_warmup_plus_rounds_times_reps():
    calls = []
    t = bench.time_host(lambda: calls.append(1), TimingSettings(rounds=3, reps=4, warmup=2))
    assert len(calls) == 2 + 3 * 4 and len(t.samples_ms) == 12 and len(t.round_medians_ms) == 3


@pytest.mark.parametrize("bad,message", [
    (TimingSettings(mode="wall"), "bench.mode='wall' is not allowed: 'events' or 'graph'"),
    (TimingSettings(rounds=0), "bench.rounds=0 is not allowed: an integer >= 1"),
    (TimingSettings(warmup=-1), "bench.warmup=-1 is not allowed: an integer >= 0")])
def test_bad_timing_settings_are_refused(bad, message):
    with pytest.raises(ValueError, match="bench") as e:
        bench.time_host(lambda: None, bad)
    assert str(e.value) == message


def test_check_output_finds_unwritten_elements():
    ref = torch.rand(2, 3, 4, 4, dtype=torch.float64) + 0.5
    out = ref.float().clone()
    out[0, 1, 2, 3] = float("nan")
    c = bench.check_output(out, ref, 1e-3)
    assert not c.ok and c.unwritten == 1 and "1 of 96" in c.message


def test_check_output_measures_relative_error():
    ref = torch.rand(1000, dtype=torch.float64) + 1.0
    assert bench.check_output(ref.float(), ref, 1e-5).ok
    wrong = ref.float().clone()
    wrong[:10] += 1.0  # a few badly wrong elements
    c = bench.check_output(wrong, ref, 2e-3)
    assert not c.ok and c.rel_err > 2e-3 and "tolerance" in c.message


def test_first_call_returns_time_and_result():
    def call():
        time.sleep(0.05)
        return 42
    s, r = bench.first_call(call, None)
    assert r == 42 and s >= 0.05  # the call's wall time, in seconds: at least the sleep inside it


def test_l1_50_counts_match_the_brief():
    assert L1_50.output_shape == (256, 96, 55, 55)
    assert L1_50.flops == pytest.approx(53.97e9, rel=1e-3)
    assert L1_50.min_bytes == pytest.approx(451.65e6, rel=1e-4)


@pytest.mark.parametrize("name,expect", [
    ("NVIDIA H200", "NVIDIA H200"), ("NVIDIA H100 80GB HBM3", "NVIDIA H100 SXM"), ("NVIDIA H100 PCIe", "NVIDIA H100 PCIe"),
    ("NVIDIA A100-SXM4-80GB", "NVIDIA A100 80GB"), ("NVIDIA GeForce RTX 4090", "NVIDIA GeForce RTX 4090"),
])
def test_gpu_spec_lookup(name, expect):
    assert gpu_spec(name).name == expect


def test_unknown_gpu_has_no_spec_and_no_percentages():
    assert gpu_spec("NVIDIA T4") is None
    m = performance(L1_50, 2.0, None, "tf32")
    assert "pct_peak_tflops" not in m and m["tflops"] == pytest.approx(53.97e9 / 2e-3 / 1e12, rel=1e-3)


def test_percent_of_peak_uses_the_precision_ceiling():
    h200 = gpu_spec("NVIDIA H200")
    tf32, ieee = performance(L1_50, 1.0, h200, "tf32"), performance(L1_50, 1.0, h200, "ieee")
    assert tf32["pct_peak_tflops"] == pytest.approx(100 * 53.97 / 494.7, rel=1e-3)
    assert ieee["pct_peak_tflops"] == pytest.approx(100 * 53.97 / 66.9, rel=1e-3)
    assert tf32["gbps"] == pytest.approx(451.65, rel=1e-3) and tf32["pct_peak_gbps"] == pytest.approx(100 * 451.65 / 4800, rel=1e-3)


def test_floor_is_the_larger_of_compute_and_traffic():
    # docs/PERFORMANCE.md, the floor of L1 #50: max(53.97 GFLOP / 368 TFLOP/s, 451.65 MB / 4.27 TB/s) = 0.147 ms on an H200, measured ceilings
    assert floor_ms(L1_50, gpu_spec("NVIDIA H200"), "tf32") == (pytest.approx(0.1467, rel=1e-3), "measured")
    h100, src = gpu_spec("NVIDIA H100 80GB HBM3"), None
    got, src = floor_ms(L1_50, h100, "tf32")
    assert src == "datasheet" and got == pytest.approx(1e3 * max(53.97e9 / 494.7e12, 451.65e6 / 3350e9), rel=1e-3)
    assert all(not math.isnan(s.dram_gbps) for _, s in GPU_SPECS)
