"""The kernel interface (kernels/base.py, kernels/host.py): a variant is one module, its conf/kernel YAML and its
tests. A copy of the project gets a new variant that way, with no other file touched, and the tracker, the library's
pins, verify and the registry-derived lists all take it."""

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from convtune.errors import ConfigError, UnsupportedProblem
from convtune.kernels import REGISTRY, Meta, get_variant
from convtune.kernels.host import Host

ROOT = Path(__file__).resolve().parents[1]

TOY = '''"""toy_direct: a direct convolution, one program per output element (a fixture of tests/test_kernel_interface.py)."""

import torch
import triton
import triton.language as tl

from convtune.kernels.base import KernelVariant, Knob, Space, register
from convtune.kernels.meta import Meta
from convtune.kernels.host import Host, without_input
from convtune.kernels.identity import KernelSource


@triton.jit
def _toy_kernel(x_ptr, w_ptr, y_ptr, C: tl.constexpr, H: tl.constexpr, W: tl.constexpr, KH: tl.constexpr,
                KW: tl.constexpr, OH: tl.constexpr, OW: tl.constexpr, C_OUT: tl.constexpr, LLVM_OPT: tl.constexpr):
    i = tl.program_id(0)  # one output element of an NCHW output, at stride 1 and no padding
    ow = i % OW
    oh = (i // OW) % OH
    k = (i // (OW * OH)) % C_OUT
    n = i // (OW * OH * C_OUT)
    acc = 0.0
    for c in range(C):
        for r in range(KH):
            for s in range(KW):
                acc += tl.load(x_ptr + ((n * C + c) * H + oh + r) * W + ow + s) * tl.load(w_ptr + ((k * C + c) * KH + r) * KW + s)
    tl.store(y_ptr + i, acc)


SPACE = Space("toy_direct", (Knob("num_warps", (1,), "one program an output element", name="lanes"),))


def make_plan(g, has_bias, meta, precision, out_cl=False):
    from convtune.errors import UnsupportedProblem

    if g.stride != (1, 1) or g.padding != (0, 0) or g.dilation != (1, 1) or has_bias or out_cl or precision != "ieee":
        raise UnsupportedProblem("toy_direct takes ieee, stride 1, no padding, no dilation, no bias, an NCHW output")
    SPACE.check(meta)
    return dict(grid=(g.n * g.c_out * g.oh * g.ow,), cx=dict(C=g.c, H=g.h, W=g.w, KH=g.kh, KW=g.kw, OH=g.oh, OW=g.ow,
                                                           C_OUT=g.c_out))


def run(plan, x, weight, bias, out):
    return _toy_kernel[plan["grid"]](x, weight, out, **plan["cx"], LLVM_OPT="none", num_warps=1), "none"


def draw_case(rng, small):
    """A case in its family: stride 1, no padding, no dilation, no bias."""
    return dict(n=rng.randint(1, 2), c=rng.randint(1, 3), h=rng.randint(3, 6), w=rng.randint(3, 6),
                k=rng.randint(1, 4), kh=rng.randint(1, 3), kw=rng.randint(1, 3), stride=(1, 1), padding=(0, 0),
                dilation=(1, 1), bias=False, offset=0, init="randn", meta=None, seed=rng.randrange(2**31))


HOST = Host(without_input(make_plan), lambda x, plan: x.contiguous(), run)
register(KernelVariant(
    name="toy_direct", launch=HOST.launch, prepared=HOST.prepared, library=HOST,
    default_meta=lambda *a, **k: Meta(16, 16, 16, 1, 1), source=KernelSource(1, (_toy_kernel,)),
    previous_hashes=("0ld50urceh45",), tf32_ties="even", entry_points=("_toy_kernel",),
    restricted_to="ieee, stride 1, no padding, no dilation, no bias", draw_case=draw_case, precisions=("ieee",),
    space=SPACE))
'''


def test_every_library_variant_is_called_through_one_host():
    for name, variant in REGISTRY.items():
        if variant.library is None:
            continue
        assert isinstance(variant.library, Host), name
        assert variant.launch == variant.library.launch and variant.prepared == variant.library.prepared, name


def test_the_host_refuses_a_bias_the_kernel_would_read_past():
    x, w = torch.randn(1, 3, 6, 6), torch.randn(4, 3, 3, 3)
    bias = torch.randn(8)[::2]  # a strided view: the kernel reads the bias by its pointer
    with pytest.raises(UnsupportedProblem, match="bias must be contiguous"):
        get_variant("implicit_gemm").launch(x, w, bias, 1, 1, 1, get_variant("implicit_gemm").default_meta(4, 1, 6))


def test_the_host_writes_its_layout_unless_given_an_output():
    x, w = torch.randn(1, 3, 6, 6), torch.randn(4, 3, 3, 3)
    meta = Meta(16, 16, 16, 4, 2)
    nhwc = get_variant("nhwc_igemm").launch(x, w, None, 1, 1, 1, meta, "ieee").out
    nchw = get_variant("implicit_gemm").launch(x, w, None, 1, 1, 1, meta, "ieee").out
    given = torch.empty(1, 4, 6, 6)
    into = get_variant("nhwc_igemm").launch(x, w, None, 1, 1, 1, meta, "ieee", out=given).out
    ref = torch.nn.functional.conv2d(x.double(), w.double(), None, 1, 1).float()
    assert nhwc.is_contiguous(memory_format=torch.channels_last) and not nhwc.is_contiguous()
    assert nchw.is_contiguous() and into is given
    for out in (nhwc, nchw, into):
        torch.testing.assert_close(out, ref, atol=1e-4, rtol=1e-4)


def test_a_knob_is_refused_by_its_own_name_and_micro_tuning_moves_it_within_its_values():
    space = get_variant("fused_gluon").space
    with pytest.raises(ConfigError, match=r"num_stages.*\(warpgroups: its MMA warpgroups"):
        space.check(Meta(64, 128, 16, 4, 3))
    assert space.neighbours("num_stages", 2, (2, 3, 4)) == (1,)  # its warpgroups: 1 or 2, not the pipeline's 2-4
    assert not space.allows(Meta(64, 128, 16, 8, 2))
    assert get_variant("nchw_igemm").space.neighbours("num_stages", 3, (2, 3, 4)) == (2, 4)  # not restricted


@pytest.mark.slow
def test_a_new_variant_is_one_module_and_its_yaml(tmp_path):
    copy = tmp_path / "project"
    shutil.copytree(ROOT / "src", copy / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    shutil.copytree(ROOT / "conf", copy / "conf")
    shutil.copy(ROOT / "run.py", copy / "run.py")
    (copy / "src/convtune/kernels/variants/toy_direct.py").write_text(TOY, encoding="utf-8")
    (copy / "conf/kernel/toy_direct.yaml").write_text("name: toy_direct\n", encoding="utf-8")
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": str(copy / "src"), "HYDRA_FULL_ERROR": "0"}

    listed = subprocess.run([sys.executable, "-c", textwrap.dedent("""
        import convtune.kernels as k
        from convtune.commands import verify_cases
        assert k.__file__.startswith(%r), k.__file__
        cases = verify_cases.make_cases(['toy_direct'], ['ieee'], 2, 0, True)
        assert [c.variant for c in cases] == ['toy_direct'] * 2, cases
        print(sorted(k.VARIANTS), k.LIBRARY_KERNELS, sorted(e for v in k.REGISTRY.values() for e in v.entry_points))
    """ % str(copy))], env=env, capture_output=True, text=True, cwd=copy, timeout=300)
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.count("toy_direct") == 2 and "_toy_kernel" in listed.stdout, listed.stdout

    store = f"sqlite:///{tmp_path / 'mlruns' / 'mlflow.db'}"
    ran = subprocess.run([sys.executable, "run.py", "kernel=toy_direct", "problem=tiny", "precision=ieee",
                          "problem.stride=[1,1]", "problem.padding=[0,0]", "problem.bias=false", "problem.batch=1",
                          "problem.out_channels=2", "problem.height=6", "problem.width=6", "problem.kernel_h=3",
                          "problem.kernel_w=3", "bench=fast", f"tracking.uri={store}",
                          f"pins_file={tmp_path / 'pins.yaml'}", f"hydra.run.dir={tmp_path / 'out'}"],
                         env=env, capture_output=True, text=True, cwd=copy, timeout=300)
    assert ran.returncode == 0, ran.stdout[-2000:] + ran.stderr[-2000:]
    import mlflow

    runs = mlflow.MlflowClient(store).search_runs(
        [e.experiment_id for e in mlflow.MlflowClient(store).search_experiments()])
    assert [(r.data.tags.get("kernel"), r.info.status) for r in runs] == [("toy_direct", "FINISHED")]


def test_a_variant_is_checked_as_it_is_declared():
    """Everything code and tests look up about a variant is declared with keywords and checked when it is made: a
    restricted variant without its case draw was accepted silently, and verify then drew general cases for it."""
    from convtune.kernels.base import KernelVariant

    ig = get_variant("implicit_gemm")
    good = dict(name="toy", launch=ig.launch, prepared=ig.prepared, library=ig.library, default_meta=ig.default_meta,
                source=ig.source, tf32_ties="away", entry_points=("_k",))
    KernelVariant(**good)  # the minimum a variant declares
    for change, words in (
            (dict(restricted_to="stride 1"), "draw_case is required: it is restricted to stride 1"),
            (dict(dtypes=("float64",)), "dtypes must be taken from ['float32', 'bfloat16', 'float16'], not ['float64']"),
            (dict(dtypes=()), "dtypes must be taken from"),
            (dict(epilogues=("bias", "tanh")), "epilogues must be taken from ['bias', 'bn', "),
            (dict(precisions=("fp8",)), "precisions must be taken from ['tf32', 'tf32_trunc', 'tf32x3', 'ieee']"),
            (dict(name="Toy-1"), "name must be lowercase letters, digits and '_'"),
            (dict(tf32_ties="up"), "tf32_ties must be one of ['away', 'even']"),
            (dict(entry_points=()), "entry_points must name the jit kernels it launches"),
            (dict(library=None, prepared=None, serves=lambda layout, c: True), "serves needs `library`"),
            (dict(prepared=None), "launch and prepared must be its library Host's"),
            (dict(rank=True), "rank must be an integer"),
            (dict(compute_capability=9), "compute_capability must be (major, minor)"),
            (dict(source="0" * 12), "source must be a KernelSource (kernels/identity.py), not str")):
        with pytest.raises(ValueError) as e:
            KernelVariant(**{**good, **change})
        assert str(e.value).startswith(f"kernel variant '{change.get('name', 'toy')}': {words}"), str(e.value)
    with pytest.raises(TypeError):
        KernelVariant("toy", ig.launch)  # keywords only: a declaration says what each value is


def test_the_librarys_default_is_the_highest_ranked_variant_that_serves_the_call():
    from convtune.kernels import VARIANTS, library_variant

    for layout in ("nchw", "channels_last"):
        for channels in (1, 3, 4, 15, 16, 18, 20, 64, 96):
            serving = [v for v in VARIANTS.values() if v.serves is not None and v.serves(layout, channels)]
            assert serving and library_variant(layout, channels) == max(serving, key=lambda v: v.rank).name
            assert get_variant(library_variant(layout, channels)).library is not None
