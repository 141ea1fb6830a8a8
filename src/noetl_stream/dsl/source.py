"""Reading YAML while keeping line numbers, and turning ruamel nodes into plain values."""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq
from ruamel.yaml.error import YAMLError


class YamlSyntaxError(ValueError):
    def __init__(self, message: str, line: int | None) -> None:
        super().__init__(message)
        self.line = line


def load_yaml(text: str) -> Any:
    yaml = YAML(typ="rt")
    try:
        return yaml.load(text)
    except YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark is not None else None
        problem = getattr(exc, "problem", None) or str(exc)
        raise YamlSyntaxError(f"YAML syntax error: {problem}", line) from exc


def line_of(node: Any, key: Any = None) -> int | None:
    """1-based line of `node` (or of `key` inside a mapping / index inside a sequence)."""
    try:
        if key is not None and isinstance(node, CommentedMap):
            return int(node.lc.key(key)[0]) + 1
        if key is not None and isinstance(node, CommentedSeq):
            return int(node.lc.item(key)[0]) + 1
        if isinstance(node, (CommentedMap, CommentedSeq)):
            return int(node.lc.line) + 1
    except (KeyError, IndexError, TypeError, AttributeError):
        return None
    return None


def plain(value: Any) -> Any:
    """Strip ruamel's wrapper types so the IR holds only JSON-like values."""
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [plain(v) for v in value]
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    if isinstance(value, str):
        return str(value)
    return str(value)


def suggest(word: str, known: Iterable[str]) -> str:
    """`; did you mean "x"?` or empty."""
    close = difflib.get_close_matches(word, list(known), n=1, cutoff=0.6)
    return f'; did you mean "{close[0]}"?' if close else ""
