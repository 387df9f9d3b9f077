"""A kernel's identity for runs and pins: what changes its results or speed, and nothing else.

The identity hashes the source of the jit functions a kernel compiles (its kernels and every jit function they call,
found by name), with docstrings, comments and layout dropped (its tokens), its compile
options, and an explicit `version` that a deliberate change of the host's numerics (a weight rounded on the host, a
plan that picks another tile) bumps. Host plumbing (checks, plans, caches, bound launches, their comments) is not
part of it: before, a kernel's hash covered that text too, so factoring a copy out of a launcher, or fixing a comment,
orphaned every pin's measured runs.

The same source gives the same identity compiled or under Triton's interpreter. Each kernel module sets
`VERSION`, `SOURCE = KernelSource(VERSION, (its jit roots))` and `PREVIOUS_SOURCE_HASHES`: what runs of the
same kernel recorded when the hash covered the host code's text too (resume and promote find them). A KernelSource
hashes on first use: reading and tokenizing the sources of every kernel takes 0.3-0.5 CPU-s (a 2-core AMD EPYC), which
every process that imported the kernels paid, and only a process that records or promotes runs needs an identity,
mostly one kernel's.
"""

from __future__ import annotations

import ast
import hashlib
import inspect
import io
import textwrap
import tokenize
import types
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any, Iterable, Optional

from triton.runtime.jit import KernelInterface


def _docstring_lines(tree: ast.AST) -> set[int]:
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
                lines |= set(range(first.lineno, (first.end_lineno or first.lineno) + 1))
    return lines


def normalized_text(text: str) -> str:
    """Source text without comments, docstrings or layout: its tokens, one logical line a line. Built from the
    tokenizer, not from `ast.unparse`, whose output may differ between Python versions (the GPU machine's and CI's)."""
    text = textwrap.dedent(text)
    skip = _docstring_lines(ast.parse(text))
    out, line = [], []
    for tok in tokenize.generate_tokens(io.StringIO(text).readline):
        if tok.type in (tokenize.COMMENT, tokenize.NL, tokenize.ENCODING, tokenize.ENDMARKER):
            continue
        if tok.start[0] in skip and tok.type not in (tokenize.INDENT, tokenize.DEDENT):
            continue  # a docstring (the block's indent opens on its line)
        if tok.type == tokenize.NEWLINE:
            if line:
                out.append(" ".join(line))
            line = []
        elif tok.type == tokenize.INDENT:
            line.append("<indent>")
        elif tok.type == tokenize.DEDENT:
            line.append("<dedent>")
        else:
            line.append(tok.string)
    if line:
        out.append(" ".join(line))
    return "\n".join(out)


def normalized_source(obj: Any) -> str:
    """A function's (a jit function's Python function) or a module's source as normalized_text: two texts that
    compile alike read alike."""
    return normalized_text(inspect.getsource(getattr(obj, "fn", obj)))


def _is_jit(obj: Any) -> bool:
    """A jit function of this project (Triton's own library, tl.cdiv and the like, is Triton's version's business)."""
    return isinstance(obj, KernelInterface) and getattr(obj.fn, "__module__", "").startswith("convtune.")


def jit_closure(roots: Iterable[Any]) -> list[Any]:
    """The jit functions `roots` are and every jit function their source names, transitively (looked up in each
    function's module globals, as Triton resolves them), in a stable order: by module name (its last part) and
    qualified name, so that where a module sits in the package (kernels/ or kernels/variants/) changes no identity."""
    found: dict[str, Any] = {}
    todo = [r for r in roots if _is_jit(r)]
    while todo:
        fn = todo.pop()
        py = fn.fn
        key = f"{py.__module__.rsplit('.', 1)[-1]}.{py.__qualname__}"
        if key in found:
            continue
        found[key] = fn
        tree = ast.parse(textwrap.dedent(inspect.getsource(py)))
        for node in ast.walk(tree):
            if isinstance(node, ast.Name):
                obj = py.__globals__.get(node.id)
            elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
                owner = py.__globals__.get(node.value.id)
                obj = getattr(owner, node.attr, None) if isinstance(owner, types.ModuleType) else None
            else:
                continue
            if _is_jit(obj):
                todo.append(obj)
    return [found[k] for k in sorted(found)]


def kernel_identity(version: int, jit: Iterable[Any], files: Iterable[Path] = (),
                    options: Optional[dict[str, Any]] = None) -> str:
    """A short hash of the kernel's jit code (`jit` and what it calls; `files` whose whole text is jit code, such as a
    Gluon kernel's module that is imported only on its first launch), its compile `options` and its `version`."""
    h = hashlib.sha256(f"version {version}\noptions {sorted((options or {}).items())!r}\n".encode())
    for fn in jit_closure(jit):
        h.update(f"{fn.fn.__qualname__}\n{normalized_source(fn)}\n".encode())
    for path in files:
        text = normalized_text(Path(path).read_text(encoding="utf-8"))
        h.update(f"file {Path(path).name}\n{text}\n".encode())
    return h.hexdigest()[:12]


@dataclass(frozen=True)
class KernelSource:
    """What a kernel's identity is made of (kernel_identity's version, jit roots and files), hashed on first use and
    kept."""

    version: int
    jit: tuple[Any, ...]
    files: tuple[Path, ...] = ()

    @cached_property
    def hash(self) -> str:
        return kernel_identity(self.version, self.jit, self.files)
