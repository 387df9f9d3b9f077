"""meta.safe_stages: nhwc_igemm compiles a K loop of 2 to num_stages - 1 steps at a depth of its length (Triton 3.6
gave wrong, launch-to-launch different sums there on the H200; tests/gpu_scripts/nhwc_short_k.py is the GPU check), and
no other loop: the plan's num_stages, the pinned binaries unchanged, the output right in the interpreter."""

import re

import pytest
import torch
import torch.nn.functional as F
import triton
import yaml

from convtune.kernels import Meta
from convtune.kernels.variants import nhwc_igemm
from convtune.kernels.conv_args import geometry
from convtune.kernels.meta import safe_stages
from convtune.pins import default_path


@pytest.mark.parametrize("stages, steps, expected", [
    (3, 2, 2), (4, 3, 3), (5, 4, 4),  # num_stages - 1 steps: one stage less
    (4, 2, 2), (5, 2, 2), (5, 3, 3),  # shorter still: a depth of the loop's length (2 steps at 4 went wrong)
    (2, 1, 2), (1, 0, 1),  # a loop of one step at two stages was right on the H200; nothing under two stages
    (3, 1, 3), (4, 1, 4), (3, 3, 3), (4, 4, 4), (3, 108, 3),  # every other trip count as asked
])
def test_safe_stages_compiles_short_loops_at_a_depth_of_their_length(stages, steps, expected):
    assert safe_stages(stages, steps) == expected


@pytest.mark.parametrize("c, r, meta, stages", [
    (96, 1, Meta(128, 256, 32, 8, 4), 3),  # 3 K steps: the H200's wrong case, compiled at 3 stages
    (64, 1, Meta(64, 256, 32, 4, 3), 2),  # 2 steps
    (128, 1, Meta(64, 256, 32, 4, 5), 4),  # 4 steps
    (64, 1, Meta(128, 256, 32, 8, 4), 2),  # 2 steps at 4 stages: the H200's other wrong case, compiled at 2
    (96, 3, Meta(128, 256, 32, 8, 4), 4),  # 27 steps
    (96, 1, Meta(128, 256, 64, 8, 3), 2),  # BLOCK_K 64: 2 steps at 3 stages
])
def test_the_plan_compiles_the_short_loop_one_stage_shallower(c, r, meta, stages):
    x, w = torch.zeros(1, c, 5, 5), torch.zeros(8, c, r, r)
    for precision in ("tf32", "ieee"):
        plan = nhwc_igemm.make_plan(geometry(x, w, 1, r // 2, 1), False, meta, precision)
        assert plan.constexprs["num_stages"] == stages
        assert ("num_stages", stages) in plan.binary_key


def test_no_pinned_nhwc_binary_is_compiled_at_other_stages():
    """No nhwc pin in the shipped pins file has a loop shorter than its num_stages: its binary, and so its
    promoted timing, is the one it was measured with."""
    pins = yaml.safe_load(default_path().read_text())["pins"]
    checked = 0
    for sections in pins.values():
        for section, entries in sections.items():
            for key, entry in entries.items():
                if not entry.get("kernel", section).startswith("nhwc") or "meta" not in entry:
                    continue
                c = int(re.search(r"-c(\d+)-", key).group(1))
                kh, kw = map(int, re.search(r"-r(\d+)x(\d+)-", key).groups())
                meta = entry["meta"]
                steps = kh * kw * triton.cdiv(c, meta["BLOCK_K"])
                assert safe_stages(meta["num_stages"], steps) == meta["num_stages"], key
                checked += 1
    assert checked >= 5


def test_a_clamped_plan_computes_the_convolution_in_the_interpreter():
    torch.manual_seed(0)
    x = torch.randn(2, 96, 5, 6).contiguous(memory_format=torch.channels_last)
    w = torch.randn(40, 96, 1, 1) / 96 ** 0.5
    b = torch.randn(40)
    for launch in (nhwc_igemm.launch, nhwc_igemm.launch_preround):
        y = launch(x, w, b, 1, 0, 1, Meta(128, 256, 32, 8, 4), "ieee").out
        assert torch.allclose(y, F.conv2d(x, w, b), atol=1e-4, rtol=1e-4)
