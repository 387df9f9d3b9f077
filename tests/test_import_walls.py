"""The rooms of the pipeline and what each may import (docs/DESIGN.md), checked on the source itself."""

import ast
from pathlib import Path

import pytest

from tests.conftest import ROOT

SRC = ROOT / "src"
THIRD_PARTY_BANNED = {
    "kernels": {"mlflow", "hydra", "omegaconf", "matplotlib"},
    "measure": {"mlflow", "hydra", "omegaconf", "matplotlib"},
    "track": {"torch", "triton", "hydra", "omegaconf"},
    "record": {"torch", "triton", "hydra", "omegaconf", "mlflow"},
    "hydra_plugins": set(),
    "library": {"mlflow", "hydra", "omegaconf", "matplotlib"},
    "pins": {"mlflow", "hydra", "omegaconf", "matplotlib"},
    "commands": {"mlflow", "hydra", "omegaconf"},
    "launch": {"torch", "triton", "mlflow"},
}
CONVTUNE_ALLOWED = {  # the convtune modules each room may import (its own room always)
    # the problem's vocabulary (the epilogue ops a kernel fuses), pure and torch-free
    "kernels": {"convtune.errors", "convtune.strict_yaml", "convtune.problem"},
    "measure": {"convtune.kernels", "convtune.problem", "convtune.errors", "convtune.record", "convtune.config",
                "convtune.pins"},
    "track": {"convtune.record", "convtune.interrupts", "convtune.errors"},
    "record": set(),
    # tune_model.py converts a model with the library and contests each shape as its first use would
    "tune": {"convtune.kernels", "convtune.measure", "convtune.track", "convtune.record", "convtune.resolve",
             "convtune.device", "convtune.config", "convtune.problem", "convtune.errors", "convtune.library",
             "convtune.interrupts", "convtune.pins", "convtune.forked"},
    "hydra_plugins": set(),  # the sweeper calls convtune only through the functions its config names
    # the first-use contest (library/dispatch.py) is the tracker's: its timing and the judge's check (measure/contest)
    "library": {"convtune.kernels", "convtune.problem", "convtune.errors", "convtune.measure", "convtune.config",
                "convtune.pins"},
    # the pins file, its schema and the per-user overlay: data about kernels (a pin's Meta, the variants' names)
    "pins": {"convtune.kernels", "convtune.errors", "convtune.strict_yaml"},
    # verify --first-use checks the library's first-use path
    "commands": {"convtune.kernels", "convtune.measure", "convtune.problem", "convtune.config", "convtune.errors",
                 "convtune.library"},
    # the launchers record lost jobs through the sweep's state, never through the sweep's callback (sweep.py)
    "launch": {"convtune.sweep_state", "convtune.record", "convtune.errors", "convtune.interrupts", "convtune.forked"},
}


def room_of(path: Path) -> str:
    rel = path.relative_to(SRC).parts
    if rel[0] == "hydra_plugins":
        return "hydra_plugins"
    return rel[1] if len(rel) > 2 else rel[1].removesuffix(".py")


def imports(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names |= {node.module} | {f"{node.module}.{a.name}" for a in node.names if node.module == "convtune"}
    return names


FILES = [p for p in sorted(SRC.rglob("*.py")) if room_of(p) in CONVTUNE_ALLOWED]


@pytest.mark.parametrize("path", FILES, ids=[str(p.relative_to(SRC)) for p in FILES])
def test_each_room_imports_only_what_it_may(path):
    room = room_of(path)
    own = "hydra_plugins" if room == "hydra_plugins" else f"convtune.{room}"
    allowed = CONVTUNE_ALLOWED[room] | {own}
    bad = sorted(n for n in imports(path) if n.startswith("convtune") and n != "convtune"
                 and not any(n == a or n.startswith(a + ".") for a in allowed))
    banned = sorted(n for n in imports(path) if n.split(".")[0] in THIRD_PARTY_BANNED.get(room, set()))
    assert bad == [] and banned == [], f"{path.relative_to(SRC)} imports {bad + banned}"


def test_every_room_is_checked():
    rooms = {room_of(p) for p in SRC.rglob("*.py")}
    assert {"kernels", "measure", "track", "record", "tune", "hydra_plugins", "library", "commands", "launch",
            "pins"} <= rooms


def _import_graph() -> dict[str, set[str]]:
    """Module → the project modules it imports (at any depth of its code: a function-level import is an edge too). An
    import of a package's submodule is an edge to the submodule alone."""
    mods = {}
    for p in SRC.rglob("*.py"):
        parts = list(p.relative_to(SRC).with_suffix("").parts)
        mods[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = p
    graph = {}
    for name, p in mods.items():
        deps = set()
        for node in ast.walk(ast.parse(p.read_text())):
            if isinstance(node, ast.Import):
                deps |= {a.name for a in node.names if a.name in mods}
            elif isinstance(node, ast.ImportFrom) and node.module in mods and node.level == 0:
                subs = {f"{node.module}.{a.name}" for a in node.names} & set(mods)
                deps |= subs | ({node.module} if len(subs) < len(node.names) else set())
        graph[name] = deps - {name}
    return graph


def test_no_two_modules_import_each_other_through_any_path():
    """An import cycle makes a module's names depend on which module was imported first; the launchers, for one,
    record lost jobs through sweep_state, which imports nothing of the sweep."""
    graph = _import_graph()

    def reach(start: str) -> set[str]:
        seen, todo = set(), [start]
        while todo:
            for dep in graph.get(todo.pop(), ()):
                if dep not in seen:
                    seen.add(dep)
                    todo.append(dep)
        return seen
    cycles = sorted((a, b) for a in graph for b in graph[a]
                    if a in reach(b) and not (b.startswith(a + ".") or a.startswith(b + ".")))
    assert cycles == []


MAX_LINES = 400  # a module longer than this does several jobs: split it by job


def test_no_module_is_over_400_lines():
    long = {str(p.relative_to(SRC)): n for p in SRC.rglob("*.py") if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert long == {}
