"""Reading YAML while keeping line numbers, and turning ruamel nodes into plain values."""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from typing import overload

from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq
from ruamel.yaml.error import YAMLError

from noetl_stream.dsl import yaml_events
from noetl_stream.errors import YamlSyntaxError
from noetl_stream.jsonutil import JsonObject, JsonValue

MAX_NESTING = 100  # levels of mappings and lists a playbook may nest (aliases included)
MAX_VALUES = 1_000_000  # values a playbook may hold once its aliases are expanded


class _Yaml(YAML):
    """ruamel's round-trip YAML without its plug-in search. Each `YAML()` otherwise globs its
    package folder for `__plug_in__.py` files: file-system calls on the event loop for every
    playbook the server, the worker or the API parses. Playbooks use no ruamel plug-in.
    """

    def official_plug_ins(self) -> list[str]:
        return []


class _NotRead:
    """What `_load_fast` gives for a document it leaves to ruamel."""


_NOT_READ = _NotRead()


def _load_fast(text: str) -> JsonValue | _NotRead:
    """The document read on the fast path, or _NOT_READ when it must be read by ruamel alone
    (what it uses is not on that path, or it fails: ruamel then says why, as it always did).
    """
    fast = _read_fast(text)
    return fast if isinstance(fast, _NotRead) else fast.document


def _read_fast(text: str) -> yaml_events.Read | _NotRead:
    """`_load_fast`, with the count of values the document holds."""
    if not yaml_events.AVAILABLE:
        return _NOT_READ
    try:
        return yaml_events.read(text, _Yaml(typ="rt").constructor)
    except Exception:  # every failure is read again, and reported, by ruamel alone
        return _NOT_READ


def load_yaml(text: str) -> JsonValue:
    """The document, with line numbers. Bounded: nesting deeper than MAX_NESTING or aliases that
    expand to more than MAX_VALUES values ("billion laughs") are syntax errors, so nothing that
    walks the document afterwards can recurse or loop without end.
    """
    fast = _read_fast(text)
    if not isinstance(fast, _NotRead):
        # The fast path takes no aliases and nests at most yaml_events.MAX_DEPTH (<=
        # MAX_NESTING) deep, so its count of values is what the document expands to: only a
        # document past MAX_VALUES is walked, to say where.
        if fast.values > MAX_VALUES:
            _check_bounds(fast.document)
        return fast.document
    yaml = _Yaml(typ="rt")
    try:
        doc: JsonValue = yaml.load(text)
    except YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark is not None else None
        problem = getattr(exc, "problem", None) or str(exc)
        raise YamlSyntaxError(f"YAML syntax error: {problem}", line) from exc
    except RecursionError:
        raise YamlSyntaxError(f"the document nests more than {MAX_NESTING} levels deep",
                              _deep_line(text)) from None
    except Exception as exc:  # ruamel's constructors raise plain errors on odd scalars
        raise YamlSyntaxError(f"YAML cannot be read: {type(exc).__name__}: {exc}", None) from None
    _check_bounds(doc)
    return doc


def _deep_line(text: str) -> int | None:
    """The line where nesting first passes MAX_NESTING (ruamel's event parser does not recurse)."""
    depth = 0
    try:
        for event in _Yaml(typ="rt").parse(text):
            name = type(event).__name__
            if name in ("MappingStartEvent", "SequenceStartEvent"):
                depth += 1
                if depth > MAX_NESTING:
                    return int(event.start_mark.line) + 1
            elif name in ("MappingEndEvent", "SequenceEndEvent"):
                depth -= 1
    except Exception:  # only a better line for an error already found: any failure just omits it
        return None
    return None


def _check_bounds(doc: object) -> None:
    """Nesting depth and expanded size, computed once per distinct node (an alias shares its
    anchor's node), so measuring a billion laughs costs as little as reading it.
    """
    sizes: dict[int, tuple[int, int]] = {}  # id -> (values once expanded, nesting depth)
    on_path: set[int] = set()
    stack: list[tuple[object, bool]] = [(doc, False)]
    while stack:
        node, children_done = stack.pop()
        if not isinstance(node, (dict, list)) or (id(node) in sizes and not children_done):
            continue
        children = list(node.values()) if isinstance(node, dict) else list(node)
        containers = [c for c in children if isinstance(c, (dict, list))]
        if not children_done:
            if id(node) in on_path:
                raise YamlSyntaxError("an alias refers to a value that contains it", line_of(node))
            on_path.add(id(node))
            stack.append((node, True))
            stack.extend((c, False) for c in containers)
            continue
        on_path.discard(id(node))
        inner = [sizes[id(c)] for c in containers]
        size = 1 + len(children) - len(containers) + sum(s for s, _ in inner)
        depth = 1 + max((d for _, d in inner), default=0)
        if depth > MAX_NESTING:
            raise YamlSyntaxError(f"the document nests more than {MAX_NESTING} levels deep",
                                  line_of(node))
        if size > MAX_VALUES:
            raise YamlSyntaxError(f"the document expands to more than {MAX_VALUES} values "
                                  "(through YAML aliases?)", line_of(node))
        sizes[id(node)] = (size, depth)


def line_of(node: object, key: object = None) -> int | None:
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


@overload
def plain(value: JsonObject) -> JsonObject: ...


@overload
def plain(value: object) -> JsonValue: ...


def plain(value: object) -> JsonValue:
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


def as_int(value: object) -> int:
    """`int(value)` of a number or text; anything else (a list, a mapping, null) raises the
    TypeError `int()` raises for it, so a message built from it reads the same.
    """
    if isinstance(value, (str, int, float)):
        return int(value)
    raise TypeError("int() argument must be a string, a bytes-like object or a real number, "
                    f"not {type(value).__name__!r}")


def as_float(value: object) -> float:
    """`float(value)` of a number or text, failing as `float()` fails on anything else."""
    if isinstance(value, (str, int, float)):
        return float(value)
    raise TypeError(f"float() argument must be a string or a real number, not "
                    f"{type(value).__name__!r}")


def suggest(word: str, known: Iterable[str]) -> str:
    """`; did you mean "x"?` or empty."""
    close = difflib.get_close_matches(word, list(known), n=1, cutoff=0.6)
    return f'; did you mean "{close[0]}"?' if close else ""
