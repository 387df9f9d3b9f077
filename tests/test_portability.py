"""The library on GPUs other than the one that tuned it: what it may choose on an A100 (sm_80) or an RTX
4090 (sm_89, the brief's GPU) compiles and fits there. No GPU needed: tests/portability_check.py compiles each launch
for a named target (Triton's GPUTarget) and reports each binary's shared memory."""

import dataclasses
import json
import os
import sys
from pathlib import Path

import pytest
import yaml

from convtune.kernels import LIBRARY_KERNELS, VARIANTS
from convtune import pins
from convtune.library import dispatch, first_use
from convtune.problem import ConvProblem
from tests import preloaded

ROOT = Path(__file__).resolve().parents[1]
# (compute capability, shared memory a block may have, bytes): CUDA's limits for sm_80 and sm_89
TARGETS = [(80, 166912), (89, 101376)]
# the convolutions of conf/problem/ (a fused problem's convolution is compiled with its chain below, once)
SUITE = [p for p in (ConvProblem.from_mapping(yaml.safe_load(f.read_text()))
                     for f in sorted((ROOT / "conf/problem").glob("*.yaml"))) if not p.epilogue]


def _jobs():
    """Every configuration the library could run there: each kernel that declares it runs on those GPUs, at its
    default and its first-use neighbours on every suite problem in both layouts, in float32 (and in bfloat16 at each kernel's
    default: a 16-bit tile takes half the shared memory, and float16's binaries differ only in the MMA's type), and at every packaged pin that names
    it; and each Hopper-only kernel once, to show why it is declared so."""
    jobs, hopper_only = [], []
    for p in SUITE:
        for layout, dtype in (("nchw", "float32"), ("channels_last", "float32"), ("nchw", "bfloat16"),
                              ("channels_last", "bfloat16")):
            q = dataclasses.replace(p, layout=layout, dtype=dtype)
            for cap, _ in TARGETS:
                taken = set()
                for c in first_use.candidates(q, "tf32", (cap // 10, cap % 10), limit=99):
                    if dtype == "float32" or c.kernel not in taken:  # bfloat16: each kernel's default
                        jobs.append((c.kernel, q, c.meta.as_dict(), "tf32", False))
                        taken.add(c.kernel)
            for name in LIBRARY_KERNELS:
                v = VARIANTS[name]
                meta = v.default_meta(q.out_channels, q.stride[1], q.width, "tf32")
                if v.compute_capability == (9, 0) and v.interpreted:
                    hopper_only.append((name, q, meta.as_dict(), "tf32", True))
    # each variant that fuses epilogues, with every op: a chain of six in float32 NCHW, the rest in bfloat16
    # channels_last (at its default on a ResNet-50 layer)
    p = next(p for p in SUITE if p.name == "resnet50_layer2_3x3")
    for name, v in sorted(VARIANTS.items()):
        if v.epilogues and v.runs_on((8, 9)):
            for chain, layout, dtype in ((("bias", "bn", "add", "relu", "relu6", "silu"), "nchw", "float32"),
                                         (("gelu", "hardswish", "leaky_relu"), "channels_last", "bfloat16")):
                q = dataclasses.replace(p, layout=layout, dtype=dtype, epilogue=chain)
                jobs.append((name, q, v.default_meta(q.out_channels, q.stride[1], q.width, "tf32").as_dict(), "tf32",
                             False))
    data = pins.load(pins.PACKAGE_PINS)
    for sections in data["pins"].values():
        for section, entries in sections.items():
            for key, entry in entries.items():
                value = pins.value_of(section, entry)
                name, meta = (value.kernel, value.meta) if isinstance(value, pins.KernelPin) else (section, value)
                if value != pins.TORCH and VARIANTS[name].runs_on((8, 9)):
                    jobs.append((name, _problem_of(key), meta.as_dict(), key.split("/")[1].removesuffix("+train"),
                                 False))
    return jobs, hopper_only


def _problem_of(key):
    import re

    m = re.match(r"n(\d+)-c(\d+)-h(\d+)-w(\d+)-k(\d+)-r(\d+)x(\d+)-s(\d+)x(\d+)-p(\d+)x(\d+)-d(\d+)x(\d+)-g1-(\w+?)-"
                 r"(nchw|channels_last)-(float32|bfloat16|float16)(?:-then-([a-z0-9_.]+))?/", key)
    n, c, h, w, k, kh, kw, sh, sw, ph, pw, dh, dw = (int(v) for v in m.groups()[:13])
    return ConvProblem("pin", n, c, h, w, k, kh, kw, (sh, sw), (ph, pw), (dh, dw), 1, m[14] == "bias", dtype=m[16],
                       layout=m[15], epilogue=tuple(m[17].split(".")) if m[17] else ())


def _mapping(p):
    return dict(name=p.name or "pin", batch=p.batch, in_channels=p.in_channels, height=p.height, width=p.width,
                out_channels=p.out_channels, kernel_h=p.kernel_h, kernel_w=p.kernel_w, stride=list(p.stride),
                padding=list(p.padding), dilation=list(p.dilation), bias=p.bias, layout=p.layout, dtype=p.dtype,
                epilogue=list(p.epilogue))


@pytest.mark.slow
def test_what_the_library_may_choose_on_sm80_and_sm89_compiles_there_and_hopper_only_kernels_do_not(tmp_path):
    jobs, hopper_only = _jobs()
    pytest.importorskip("triton.backends.nvidia")
    if not (Path(__import__("triton").__file__).parent / "backends/nvidia/bin/ptxas").exists():
        pytest.skip("this Triton ships no ptxas")
    arg = tmp_path / "jobs.json"  # a file: the jobs are more than a command line takes
    arg.write_text(json.dumps([[n, _mapping(p), m, prec, once] for n, p, m, prec, once in jobs + hopper_only]))
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    r = preloaded.run([sys.executable, str(ROOT / "tests/portability_check.py"), str(arg), json.dumps(TARGETS)], cwd=ROOT,
                      env=env, timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    rows = [row for line in r.stdout.splitlines() if line.startswith("{\"") and "refused" not in (row := json.loads(line))]
    ours = [row for row in rows if VARIANTS[row["variant"]].runs_on((8, 9))]
    assert {"implicit_gemm", "fold_igemm"} <= {row["variant"] for row in ours} <= {"implicit_gemm", "fold_igemm", "seed"}
    assert len(ours) >= 20
    assert [row for row in ours if "error" in row] == []  # every one compiles for sm_80 and sm_89
    fusing = {n for n, v in VARIANTS.items() if v.epilogues and v.runs_on((8, 9))}
    assert "implicit_gemm" in fusing
    assert {(row["variant"], row["capability"]) for row in ours if row["epilogue"]} == {
        (n, cap) for n in fusing for cap, _ in TARGETS}  # the fused binaries are among them
    # A configuration over a GPU's shared memory a block is not run there: the first-use contest refuses its launch
    # ("cannot run here": test_dispatch), and no pin of those GPUs names it. Measured here: fold_igemm's 4-stage tiles.
    too_big = {(row["variant"], row["meta"], row["capability"]) for row in ours if row["shared"] > row["limit"]}
    assert all(cap == 89 and name == "fold_igemm" for name, _, cap in too_big), too_big
    # Each kernel declared Hopper-only on GPUs cannot run its default there: a binary of it (the kernel or its
    # rounding copy, PTX's cvt.rn.tf32.f32) fails in ptxas, or takes more shared memory than the GPU gives a block
    cannot = {(row["variant"], row["capability"]) for row in rows if not VARIANTS[row["variant"]].runs_on((8, 9))
              and ("error" in row or row["shared"] > row["limit"])}
    assert cannot == {(n, cap) for n, *_ in hopper_only for cap, _ in TARGETS}, cannot


def test_on_an_sm89_gpu_the_packaged_pins_choose_torch_and_a_family_table_only_kernels_that_run_there(tmp_path):
    data = pins.load(pins.PACKAGE_PINS)
    ada = "NVIDIA GeForce RTX 4090"
    keys = [(gpu, section, key) for gpu, sections in data["pins"].items() for section, entries in sections.items()
            for key in entries]
    assert keys
    for _, section, key in keys:
        p = _problem_of(key)
        precision = key.split("/")[1].removesuffix("+train")
        assert dispatch.decide(p, ada, (8, 9), precision, files=[pins.PACKAGE_PINS], first_use_on=False).rule == "torch"
    joined = tmp_path / "pins.yaml"
    joined.write_text(pins.PACKAGE_PINS.read_text().replace("gpus:\n", f"families:\n  ours:\n  - {ada}\n  - NVIDIA H200\n"
                                                             "gpus:\n", 1))
    chosen = [dispatch.decide(_problem_of(key), ada, (8, 9), key.split("/")[1].removesuffix("+train"), files=[joined],
                              first_use_on=False) for _, _, key in keys]
    named = {c.value.kernel for c in chosen if isinstance(c.value, pins.KernelPin)}
    assert named and all(VARIANTS[n].runs_on((8, 9)) for n in named), named
    assert any(c.rule == "family" for c in chosen)
