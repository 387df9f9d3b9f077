"""Import an edited copy of a module's source text as a module of its own: how the session 19 probes try a change to a
library kernel (a hint, a constant) beside the library's own, in one process, without touching the library."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType


def edit(text: str, edits: tuple[tuple[str, str], ...]) -> str:
    """`text` with each (old, new) replaced; each `old` must occur exactly once (an edit that no longer applies fails)."""
    for old, new in edits:
        assert text.count(old) == 1, f"{old!r} occurs {text.count(old)} times"
        text = text.replace(old, new)
    return text


def import_text(label: str, text: str, where: Path) -> ModuleType:
    """`text` written under `where` and imported as a fresh module (registered in sys.modules, where dataclasses look
    their module up). `label` names the copy; Triton and Gluon read the jit functions' source from the file."""
    path = where / f"edited_{abs(hash(label))}.py"
    path.write_text(text, encoding="utf-8")
    spec = importlib.util.spec_from_file_location(path.stem, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = mod
    spec.loader.exec_module(mod)
    return mod
