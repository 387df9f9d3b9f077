"""benchmarks/results.py: the commit a result row names is the tree's, marked dirty where the tree is not that
commit's (a real git repository in a temp dir)."""

import importlib.util
import subprocess

import pytest

from tests.conftest import ROOT


def results_module():
    spec = importlib.util.spec_from_file_location("bench_results", ROOT / "benchmarks" / "results.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_row_names_the_commit_and_says_dirty_where_the_tree_differs(tmp_path):
    git = ["git", "-c", "user.email=t@t", "-c", "user.name=t"]
    subprocess.run(git + ["init", "-q"], cwd=tmp_path, check=True)
    (tmp_path / "f").write_text("a")
    subprocess.run(git + ["add", "f"], cwd=tmp_path, check=True)
    subprocess.run(git + ["commit", "-qm", "x"], cwd=tmp_path, check=True)
    subprocess.run(git + ["tag", "v1"], cwd=tmp_path, check=True)  # a tag does not replace the hash
    head = subprocess.run(["git", "rev-parse", "--short=7", "HEAD"], cwd=tmp_path, capture_output=True,
                          text=True, check=True).stdout.strip()
    results = results_module()
    assert results.head_commit(tmp_path) == head
    (tmp_path / "f").write_text("b")
    assert results.head_commit(tmp_path) == head + "-dirty"


def test_rows_of_other_columns_are_refused(tmp_path, monkeypatch):
    results = results_module()
    monkeypatch.setattr(results, "RESULTS", tmp_path)
    path = results.append("b", [{"x": 1}], gpu="G", command="c", commit="abc1234", date="2026-01-01")
    assert path.read_text() == "gpu,date,commit,command,x\nG,2026-01-01,abc1234,c,1\n"
    with pytest.raises(ValueError, match="are not this benchmark's"):
        results.append("b", [{"y": 1}], gpu="G", command="c", commit="abc1234")
