"""Every name a file takes from convtune exists: `from convtune.x import name`, and `module.name` where `module` is a
convtune module the file imported. Scripts that no test runs (benchmarks/, tests/gpu_scripts/, the GPU tests) break
silently when a name moves; this reads them all without running them."""

from __future__ import annotations

import ast
import importlib
import subprocess
from types import ModuleType

import pytest

from tests.conftest import ROOT


def _python_files() -> list[str]:
    try:
        out = subprocess.run(["git", "ls-files", "*.py"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("needs a git checkout: the files checked are what `git ls-files` lists")
    return [f for f in out.split() if (ROOT / f).exists()]


def _module(name: str) -> ModuleType | None:
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError:
        return None


def missing_names(source: str) -> list[str]:
    """`module.name` for each convtune name the source takes that its module does not have."""
    tree = ast.parse(source)
    aliases: dict[str, ModuleType] = {}
    bad = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").split(".")[0] == "convtune":
            mod = _module(node.module)
            if mod is None:
                bad.append(node.module)
                continue
            for a in node.names:
                if a.name == "*":
                    continue
                sub = _module(f"{node.module}.{a.name}") if not hasattr(mod, a.name) else None
                if sub is not None:
                    aliases[a.asname or a.name] = sub
                elif not hasattr(mod, a.name):
                    bad.append(f"{node.module}.{a.name}")
                elif isinstance(getattr(mod, a.name), ModuleType):
                    aliases[a.asname or a.name] = getattr(mod, a.name)
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split(".")[0] == "convtune":
                    mod = _module(a.name)
                    if mod is None:
                        bad.append(a.name)
                    elif a.asname:
                        aliases[a.asname] = mod
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases:
            if isinstance(node.ctx, ast.Load) and not hasattr(aliases[node.value.id], node.attr):
                bad.append(f"{aliases[node.value.id].__name__}.{node.attr}")
    return sorted(set(bad))


def test_every_name_taken_from_convtune_exists():
    found = {f: missing_names((ROOT / f).read_text()) for f in _python_files()}
    assert {f: names for f, names in found.items() if names} == {}


def test_a_moved_name_is_found():
    source = ("from convtune.library.functional import conv2d, lookup\nfrom convtune.library import functional\n"
              "functional.precision_for(True)\nfunctional.conv2d\n")
    assert missing_names(source) == ["convtune.library.functional.lookup", "convtune.library.functional.precision_for"]
