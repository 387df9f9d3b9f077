"""A kernel's identity: its jit code, compile options and version; never its host plumbing or comments."""

import importlib.util
import sys

import pytest

from convtune import kernels
from convtune.kernels import identity
from convtune.kernels.variants import implicit_gemm
from convtune.record import Identity, RunView
from tests.conftest import ROOT
from tests import preloaded


def test_normalized_text_drops_comments_docstrings_and_layout_but_not_tokens():
    a = '''
    def f(x, y):
        """What f does."""
        # why it adds
        return x + y   # the sum
    '''
    b = "def f(x,y):\n    return (x+y)\n"
    assert identity.normalized_text(a) == identity.normalized_text("def f(x, y):\n  return x + y\n")
    assert identity.normalized_text(b) != identity.normalized_text(a)  # parentheses are tokens
    assert identity.normalized_text(a.replace("x + y", "x - y")) != identity.normalized_text(a)


def _edited_copy(tmp_path, monkeypatch, edit):
    """implicit_gemm's module with `edit` applied to its text, imported under a name in the project's package (so
    its jit functions count as the project's)."""
    text = (ROOT / "src/convtune/kernels/variants/implicit_gemm.py").read_text()
    text = edit(text[:text.rindex("\nregister(KernelVariant(")])  # the copy must not declare a second implicit_gemm
    path = tmp_path / "edited_igemm.py"
    path.write_text(text)
    # a module name that sorts where implicit_gemm's does among the jit functions it calls (identity.jit_closure)
    spec = importlib.util.spec_from_file_location("convtune.kernels.implicit_gemm_edited", path)
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, module)  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_host_code_and_comments_leave_the_identity_alone_and_jit_code_and_version_do_not(tmp_path, monkeypatch):
    host = _edited_copy(tmp_path, monkeypatch, lambda t: t.replace(
        '    if vec is None:\n        vec = choose_vec(',
        '    unused = 1  # host plumbing\n    if vec is None:  # a comment\n        vec = choose_vec(').replace(
        '"""The plan, with the input', '"""The launch plan, with the input'))
    assert "unused = 1" in (tmp_path / "edited_igemm.py").read_text()
    assert host.SOURCE.hash == implicit_gemm.SOURCE.hash
    jit = _edited_copy(tmp_path, monkeypatch, lambda t: t.replace("acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)",
                                                      "acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32) + 0.0"))
    assert "+ 0.0" in (tmp_path / "edited_igemm.py").read_text()
    assert jit.SOURCE.hash != implicit_gemm.SOURCE.hash
    bumped = _edited_copy(tmp_path, monkeypatch, lambda t: t.replace("\nVERSION = 1\n", "\nVERSION = 2\n"))
    assert bumped.SOURCE.hash != implicit_gemm.SOURCE.hash


def test_the_identity_is_the_same_compiled_and_under_the_interpreter():
    code = "from convtune import kernels; print(sorted((n, v.source_hash) for n, v in kernels.VARIANTS.items()))"
    env = {k: v for k, v in __import__("os").environ.items() if k != "TRITON_INTERPRET"}
    compiled = preloaded.run([sys.executable, "-c", code], env=env, timeout=300)
    assert compiled.returncode == 0, compiled.stderr[-2000:]
    assert compiled.stdout.strip() == str(sorted((n, v.source_hash) for n, v in kernels.VARIANTS.items()))


def test_a_process_that_imports_the_kernels_hashes_only_the_identities_it_uses():
    """Hashing every kernel's sources takes 0.3-0.5 CPU-s; a library call or a run of one kernel needs one identity
    or none."""
    code = ("from convtune import kernels\n"
            "hashed = lambda: sorted(n for n, v in kernels.VARIANTS.items() if 'hash' in vars(v.source))\n"
            "print(hashed()); kernels.VARIANTS['seed'].source_hash; print(hashed())")
    r = preloaded.run([sys.executable, "-c", code], env=dict(__import__("os").environ), timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.split("\n")[:2] == ["[]", "['seed']"]
    assert identity.KernelSource(1, (implicit_gemm._conv2d_igemm_kernel,)).hash == identity.kernel_identity(
        1, [implicit_gemm._conv2d_igemm_kernel])


def test_a_jit_closure_follows_the_projects_jit_calls_and_not_tritons_library():
    names = [f.fn.__qualname__ for f in identity.jit_closure([implicit_gemm._conv2d_igemm_kernel])]
    # the epilogue's functions (a call of a call), then the kernel's; tl.cdiv, tl.zeros: Triton's, not ours
    assert names == ["_apply_op", "apply_epilogue", "_conv2d_igemm_kernel", "round_tf32"]


@pytest.mark.parametrize("name", sorted(kernels.VARIANTS))
def test_runs_under_a_kernels_previous_hash_are_its_runs(name):
    """Resume and promote still find the runs measured before the identity changed (the same jit code)."""
    v = kernels.VARIANTS[name]
    assert v.source_hash not in v.previous_hashes and len(v.source_hash) == 12
    ident = Identity("NVIDIA H200", name, v.source_hash, "n1-c3-h8-w8-k4-r3x3-s1x1-p1x1-d1x1-g1-bias-nchw-float32",
                     "tf32", v.previous_hashes)
    run = lambda h: RunView({"tags": {"kernel_source_hash": h}, "params": {}, "metrics": {}})  # noqa: E731
    assert not ident.is_stale(run(v.source_hash))
    assert not any(ident.is_stale(run(h)) for h in v.previous_hashes)  # a new variant has none
    assert ident.is_stale(run("5ome0therha5"))
    filters = ident.same_measurement_filters({"BLOCK_M": 64})
    assert len(filters) == 1 + len(v.previous_hashes) and all("params.`BLOCK_M` = '64'" in f for f in filters)
    assert {f.split("kernel_source_hash = '")[1][:12] for f in filters} == {v.source_hash, *v.previous_hashes}
