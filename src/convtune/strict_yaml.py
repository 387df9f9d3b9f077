"""YAML read strictly: a key repeated in one mapping is an error naming its line, never a silent overwrite.

PyYAML's safe_load keeps the last of duplicate keys: a pins file with a second `interpreter:` block (appended by
hand or left by a merge) loaded with the first block dropped, and the next promote rewrote the file without it.
A leaf module: it imports PyYAML only.
"""

from __future__ import annotations

from typing import Any

import yaml


class DuplicateKey(yaml.YAMLError):
    """A mapping holds one key twice; `line` is the 1-based line of the second one, `first_line` of the first."""

    def __init__(self, key: str, line: int, first_line: int, path: list[str]) -> None:
        self.key, self.line, self.first_line, self.path = key, line, first_line, path
        where = " / ".join(path) or "the top level"
        super().__init__(f"line {line}: key {key!r} repeated under {where} (first at line {first_line}); "
                         "a YAML reader would keep only the last, so one is refused rather than lost")


class Cycle(yaml.YAMLError):
    """An alias refers to a node that contains it (`a: &x {b: *x}`): the document would be infinitely deep, and
    reading it on was a RecursionError."""

    def __init__(self, line: int, path: list[str]) -> None:
        where = " / ".join(path) or "the top level"
        super().__init__(f"line {line}: an alias under {where} refers to a node that contains it (a cycle)")


def _check(node: yaml.Node, path: list[str], inside: frozenset[int] = frozenset()) -> None:
    if id(node) in inside:
        raise Cycle(node.start_mark.line + 1, path)
    inside = inside | {id(node)}
    if isinstance(node, yaml.MappingNode):
        seen: dict[str, int] = {}
        for key_node, value_node in node.value:
            key = key_node.value if isinstance(key_node, yaml.ScalarNode) else str(key_node.tag)
            line = key_node.start_mark.line + 1
            if key in seen and key != "<<":
                raise DuplicateKey(key, line, seen[key], path)
            seen[key] = line
            _check(key_node, path + [key], inside)
            _check(value_node, path + [key], inside)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            _check(item, path + [f"[{i}]"], inside)


def load(text: str) -> Any:
    """The document in `text`, as yaml.safe_load reads it, except that a repeated key raises DuplicateKey and an
    alias that refers to a node containing it raises Cycle (both yaml.YAMLError). Keys are compared by their text."""
    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _check(node, [])
        return loader.construct_document(node)
    finally:
        loader.dispose()
