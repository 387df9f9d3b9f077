"""Every path the prose names exists: in the README and docs/, in the comments of the YAML configs, and in the
docstrings and comments of every Python file.

A path is a word with a file extension (`kernels/host.py`, `summary.md`) or a folder ending in a slash (`conf/`). It
passes when it is a file or folder of the repository, read from the root, from `src/`, `src/convtune/`, `conf/`,
`tests/` or the naming file's own folder; a bare file name passes when some file of the repository has it (as in
a drawn file tree); or when it is a file the code itself names (a string literal under
`src/`, `benchmarks/` or the entry points: an artifact a run writes, such as `summary.md`). Anything else is a stale
reference (a module that moved, a probe that left the tree, a note outside the repository) and fails here.
"""

from __future__ import annotations

import ast
import io
import re
import subprocess
import tokenize
from pathlib import Path, PurePosixPath

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXT = r"(?:py|md|yaml|yml|toml|sh|txt|json|png|csv|html|cfg|ini)"
PATH = re.compile(r"(?<![\w./~$<*{-])((?:[\w.-]+/)*[\w-]+\." + EXT + r"|(?:[\w-]+/)+)(?![\w*<{])")
BASES = ("", "src/", "src/convtune/", "conf/", "tests/")


def _tracked() -> list[str]:
    try:
        out = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("needs a git checkout: the repository's files are what `git ls-files` lists")
    return [f for f in out.split() if (ROOT / f).exists()]


def _docstrings(tree: ast.AST):
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
                for k, line in enumerate(first.value.value.splitlines()):
                    yield first.lineno + k, line


def prose_lines(path: Path):
    """(line number, text) of what a reader reads: a Markdown file whole, a YAML file's comments, a Python file's
    docstrings and comments."""
    text = path.read_text()
    if path.suffix == ".md":
        yield from enumerate(text.splitlines(), 1)
        return
    if path.suffix == ".yaml":
        yield from ((i, line[line.index("#"):]) for i, line in enumerate(text.splitlines(), 1) if "#" in line)
        return
    yield from _docstrings(ast.parse(text))
    for tok in tokenize.generate_tokens(io.StringIO(text).readline):
        if tok.type == tokenize.COMMENT:
            yield tok.start[0], tok.string


def code_literals(files: list[str]) -> set[str]:
    """The string literals of the code (not the tests): the file names it reads or writes."""
    out: set[str] = set()
    for f in files:
        if f.endswith(".py") and not f.startswith("tests/"):
            for node in ast.walk(ast.parse((ROOT / f).read_text())):
                if isinstance(node, ast.Constant) and isinstance(node.value, str) and len(node.value) < 200:
                    out.add(node.value)
    return out


def stale_paths(files: list[str]) -> list[str]:
    tracked = set(files)
    folders = {str(p) for f in files for p in PurePosixPath(f).parents}
    literals = code_literals(files)
    names = {PurePosixPath(f).name for f in files}
    bad = []
    for f in files:
        if not f.endswith((".md", ".py", ".yaml")):
            continue
        here = str(PurePosixPath(f).parent) + "/"
        for line_no, line in prose_lines(ROOT / f):
            for m in PATH.finditer(line):
                name = m.group(1)
                if re.search(r"https?://\S*$", line[: m.start()]):
                    continue
                if any(b + name in tracked or (b + name).rstrip("/") in folders for b in BASES + (here,)):
                    continue
                if "/" not in name and name in names:  # a bare file name, as in a drawn file tree
                    continue
                if any(lit == name or lit.endswith("/" + name) or name.endswith("/" + lit) for lit in literals):
                    continue
                bad.append(f"{f}:{line_no}: {name}")
    return bad


def test_every_path_the_prose_names_exists():
    assert stale_paths(_tracked()) == []


def test_a_stale_path_is_found(tmp_path, monkeypatch):
    # The check itself: a docstring naming a module that is not in the tree is reported, with its line.
    files = _tracked()
    probe = ROOT / "src" / "convtune" / "_doc_paths_probe.py"
    monkeypatch.setattr(Path, "read_text", _reading({probe: '"""See kernels/pins.py and docs/DESIGN.md."""\n'}))
    bad = stale_paths(files + ["src/convtune/_doc_paths_probe.py"])
    assert [b for b in bad if "_doc_paths_probe" in b] == ["src/convtune/_doc_paths_probe.py:1: kernels/pins.py"]


def _reading(extra: dict[Path, str]):
    original = Path.read_text

    def read_text(self, *a, **k):
        return extra[self] if self in extra else original(self, *a, **k)
    return read_text
