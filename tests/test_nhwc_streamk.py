"""nhwc_streamk (kernels/variants/nhwc_streamk.py): the split schedule covers each split tile's K steps once, in parts of at least
num_stages steps; the kernel's sums in the interpreter, split and not; its one-time check runs both paths on every
tile; the library runs it where a pin names it; and every convolution kernel is one llvm_opt checks. The GPU check is
tests/gpu_scripts/nhwc_streamk.py (test_gpu.py)."""

import importlib
import itertools
import pkgutil

import pytest
import torch
import torch.nn.functional as F
import triton

import convtune
from convtune import kernels
from convtune.library import dispatch, functional
from convtune.kernels import Meta, llvm_opt
from convtune import pins
from convtune.kernels.variants import nhwc_igemm
from convtune.kernels.variants import nhwc_streamk as sk
from convtune.kernels.conv_args import geometry
from convtune.kernels.precision import round_to_tf32_even


def parts(sched: sk.Schedule, steps: int, grain: int) -> list[tuple[int, int, int, int]]:
    """(worker, split tile, first K step, end K step) of every part the kernel's split path computes, by the kernel's
    own arithmetic (its worker loop, in Python)."""
    grains = sk.grains_per_tile(steps, grain)
    total = sched.sk_tiles * grains
    out = []
    for worker in range(sched.workers):
        g, end = worker * total // sched.workers, (worker + 1) * total // sched.workers
        while g < end:
            j_lo = g % grains
            j_hi = min(grains, j_lo + end - g)
            out.append((worker, g // grains, j_lo * grain, steps if j_hi == grains else j_hi * grain))
            g += j_hi - j_lo
    return out


@pytest.mark.parametrize("tiles, steps, grain, slots", list(itertools.product(
    [1, 5, 70, 131, 133, 206, 338, 1014], [2, 3, 9, 27, 108], [2, 3, 4], [3, 64, 132])))
def test_every_split_tile_is_summed_once_in_parts_of_at_least_a_grain(tiles, steps, grain, slots):
    sched = sk.split_schedule(tiles, steps, grain, slots)
    assert sched.dp_tiles + sched.sk_tiles == tiles and sched.workers <= slots  # one wave of workers at most
    if sched.workers == 0:
        return
    assert sched.dp_tiles % slots == 0  # whole waves of whole tiles first
    covered = {t: [] for t in range(sched.sk_tiles)}
    by_worker = {}
    for worker, tile, k_lo, k_hi in parts(sched, steps, grain):
        covered[tile].append((k_lo, k_hi))
        by_worker.setdefault(worker, []).append((k_lo, k_hi))
        assert k_hi - k_lo >= min(grain, steps)  # never the short loops of num_stages - 1 steps (meta.safe_stages)
    for runs in covered.values():
        runs.sort()
        assert runs[0][0] == 0 and runs[-1][1] == steps and all(a[1] == b[0] for a, b in itertools.pairwise(runs))
    assert set(by_worker) == set(range(sched.workers))  # no worker idle
    for runs in by_worker.values():  # a worker's partial parts: the one that opens its run and the one that closes it
        assert sum(1 for k_lo, k_hi in runs if (k_lo, k_hi) != (0, steps)) <= 2


def test_the_last_wave_is_split_only_where_it_runs_part_empty():
    assert sk.split_schedule(338, 108, 4, 132) == sk.Schedule(132, 206, 132)  # alexnet_conv5 at M128-N256: 2.56 waves
    assert sk.split_schedule(784, 108, 4, 132) == sk.Schedule(784)  # vgg16_conv3_2: 5.94 waves, the last 94 % full
    assert sk.split_schedule(264, 108, 4, 132) == sk.Schedule(264)  # whole waves
    assert sk.split_schedule(338, 108, 4, None) == sk.Schedule(338)  # occupancy unknown, or two programs an SM
    assert sk.split_schedule(338, 3, 4, 132) == sk.Schedule(338)  # a tile of one grain: nothing to share
    assert sk.split_schedule(5, 108, 4, 132) == sk.Schedule(0, 5, 20)  # fewer tiles than slots: 4 parts a tile


def test_it_splits_only_binaries_that_hold_an_sm_alone():
    assert sk.split_slots(1, 132) == 132
    assert sk.split_slots(2, 132) is None and sk.split_slots(None, 132) is None


def test_grains_of_a_tile_never_leave_a_short_last_grain():
    assert sk.grains_per_tile(108, 4) == 27 and sk.grains_per_tile(27, 4) == 6  # the last grain 7 steps
    assert sk.grains_per_tile(3, 4) == 1
    plan = sk.make_plan(geometry(torch.zeros(1, 96, 5, 5), torch.zeros(8, 96, 1, 1), 1, 0, 1), False,
                        Meta(128, 256, 32, 8, 4), "tf32")
    assert plan.steps == 3 and plan.constexprs["num_stages"] == 3 and plan.constexprs["GRAIN"] == 3  # safe_stages


def _case(n, c, k, r, h, w, layout, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, c, h, w, generator=g).contiguous(memory_format=layout)
    return x, torch.randn(k, c, r, r, generator=g) / (c * r * r) ** 0.5, torch.randn(k, generator=g)


@pytest.mark.parametrize("n, c, k, r, h, w, meta, slots, precision, in_cl, out_cl", [
    (2, 16, 32, 3, 5, 6, Meta(16, 16, 16, 4, 2), 3, "ieee", True, True),
    (2, 16, 32, 3, 5, 6, Meta(16, 16, 16, 4, 3), 5, "tf32", False, False),
    (1, 20, 24, 3, 4, 4, Meta(16, 32, 16, 4, 2), 7, "ieee", True, False),  # C % 4 != 0: the weight by tl.load
    (3, 8, 16, 1, 4, 4, Meta(16, 16, 16, 4, 2), 2, "tf32", False, True),  # one K step: never split
    (2, 12, 16, 3, 6, 5, Meta(16, 16, 16, 4, 2), None, "tf32", True, True),  # slots unknown: unsplit
])
def test_split_sums_are_the_convolution_in_the_interpreter(n, c, k, r, h, w, meta, slots, precision, in_cl, out_cl):
    x, wt, b = _case(n, c, k, r, h, w, torch.channels_last if in_cl else torch.contiguous_format)
    fmt = torch.channels_last if out_cl else torch.contiguous_format
    out = torch.full((n, k, h, w), float("nan")).contiguous(memory_format=fmt)
    y = sk.launch(x, wt, b, 1, r // 2, 1, meta, precision, out=out, slots=slots).out
    xr, wr = (round_to_tf32_even(x), round_to_tf32_even(wt)) if precision == "tf32" else (x, wt)
    ref = F.conv2d(xr.double(), wr.double(), b.double(), 1, r // 2)
    assert y is out and not y.isnan().any()
    torch.testing.assert_close(y.double(), ref, rtol=1e-5, atol=1e-5)
    unsplit = nhwc_igemm.launch_preround(x, wt, b, 1, r // 2, 1, meta, precision).out
    torch.testing.assert_close(y, unsplit, rtol=1e-5, atol=1e-5)
    plan = sk.make_plan(geometry(x, wt, 1, r // 2, 1), True, meta, precision, out_cl, slots)
    split = sk.split_schedule(plan.tiles, plan.steps, plan.constexprs["GRAIN"], slots)
    assert (split.workers > 0) is (slots is not None and r == 3)  # the cases above split where they can


def test_the_one_time_check_runs_both_paths_on_every_tile(monkeypatch):
    """On the H200 a binary passed a check that ran only its split path (one tile at batch 1) and was wrong on a batch
    of 4: the check runs every tile whole, then split, and here the image's tiles are both whole and split."""
    x, wt, b = _case(1, 16, 32, 3, 8, 8, torch.channels_last)
    plan = sk.make_plan(geometry(x, wt, 1, 1, 1), True, Meta(16, 16, 16, 4, 2), "ieee")
    seen = []
    launch = sk._launch
    monkeypatch.setattr(sk, "_launch", lambda cx, sched, *a: seen.append(sched) or launch(cx, sched, *a))
    out = torch.empty(1, 32, 8, 8).contiguous(memory_format=torch.channels_last)
    assert sk._right_at("none", plan, x, wt, b, out)
    tiles = 8 * 8 // 16 * 2
    assert seen == [sk.Schedule(tiles), sk.check_schedule(tiles, plan.steps, plan.constexprs["GRAIN"])]
    assert seen[1].workers > 0 and seen[1].dp_tiles > 0


def test_a_pin_naming_nhwc_streamk_runs_it_through_the_library_in_either_layout(tmp_path, monkeypatch):
    """convtune.conv2d under a pin that names nhwc_streamk: its plan, the output in the call's layout, torch's values at
    tf32 with the input rounded before the kernel (ties to even), and the caller's input untouched."""
    f = tmp_path / "pins.yaml"
    monkeypatch.setenv(pins.ENV_VAR, str(f))
    m = Meta(16, 32, 16, 2, 2)
    x_cl, w, b = _case(2, 16, 20, 3, 9, 7, torch.channels_last, seed=5)
    for inp, section, layout in ((x_cl.contiguous(), "implicit_gemm", "nchw"), (x_cl, "nhwc_igemm", "channels_last")):
        key = f"n2-c16-h9-w7-k20-r3x3-s1x1-p1x1-d1x1-g1-bias-{layout}-float32/tf32"
        pins.write_pin(f, "interpreter", section, key, pins.KernelPin("nhwc_streamk", m), {})
        dispatch.forget()
        before = inp.clone()
        y = convtune.conv2d(inp, w, b, padding=1, precision="tf32")
        [plan] = functional.cached_plans()
        assert isinstance(plan, sk.LaunchPlan) and plan.rounds
        assert y.shape == (2, 20, 9, 7) and y.is_contiguous(
            memory_format=torch.channels_last if layout == "channels_last" else torch.contiguous_format)
        ref = F.conv2d(round_to_tf32_even(inp).double(), round_to_tf32_even(w).double(), b.double(), 1, 1)
        torch.testing.assert_close(y.double(), ref, rtol=1e-5, atol=1e-5)
        assert torch.equal(inp, before) and inp.stride() == before.stride()
    dispatch.forget()


def test_it_is_a_library_kernel_the_tracker_sweeps_and_verify_draws():
    assert "nhwc_streamk" in kernels.LIBRARY_KERNELS and "nhwc_streamk" in kernels.GENERAL
    v = kernels.get_variant("nhwc_streamk")
    assert v.tf32_ties == "even" and v.source_hash == sk.SOURCE.hash
    assert v.default_meta(256, 1, 13) == Meta(128, 256, 32, 8, 4)  # nhwc_preround's: one program an SM


def test_every_convolution_kernel_is_checked_by_llvm_opt():
    """llvm_opt recompiles a wrong binary at O0 only for the kernels it names: nhwc_streamk's first GPU run refused 4
    of 240 binaries that O0 computed right, because it was not named there."""
    names = set()
    from convtune.kernels import variants

    for info in pkgutil.iter_modules(variants.__path__):
        module = importlib.import_module(f"convtune.kernels.variants.{info.name}")
        names |= {name for name, obj in vars(module).items()
                  if name.startswith("_conv2d") and isinstance(obj, triton.runtime.jit.KernelInterface)}
    ours = llvm_opt._our_entry_points()
    assert "_conv2d_nhwc_streamk_kernel" in names and names <= ours, names - ours
