"""Filters and tests NoETL's template engines have and Jinja lacks.

NoETL's server renders with minijinja and registers `split`, `keys`, `values` and `get` of its
own; minijinja's built-ins add `lines`, `bool` and the tests `startingwith` / `endingwith`.
Playbooks written against NoETL use them, so every template here has them too, with the same
results on JSON values. Pure.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from jinja2 import Environment, Undefined


def _split(value: Any, sep: str | None = None, maxsplits: int | None = None) -> list[str]:
    """`'a,b' | split(',')`; without a separator, on runs of whitespace (as Python's split)."""
    return str(value).split(sep, -1 if maxsplits is None else maxsplits)


def _mapping(value: Any, filter_name: str) -> Mapping[Any, Any]:
    if not isinstance(value, Mapping):
        raise TypeError(f"{filter_name} requires a mapping, got {type(value).__name__}")
    return value


def _keys(value: Any) -> list[Any]:
    return list(_mapping(value, "keys"))


def _values(value: Any) -> list[Any]:
    return list(_mapping(value, "values").values())


def _get(value: Any, key: Any, default: Any = None) -> Any:
    """`mapping | get('key')`, and `list | get(0)`; a missing key or index gives `default`
    (none unless given), as NoETL's filter gives undefined.
    """
    if isinstance(value, Mapping):
        return value.get(key, default)
    if isinstance(value, (list, tuple)) and isinstance(key, int) and -len(value) <= key < len(value):
        return value[key]
    return default


def _lines(value: Any) -> list[str]:
    return str(value).splitlines()


def _bool(value: Any) -> bool:
    return not isinstance(value, Undefined) and bool(value)


def _starting_with(value: Any, prefix: str) -> bool:
    return isinstance(value, str) and value.startswith(prefix)


def _ending_with(value: Any, suffix: str) -> bool:
    return isinstance(value, str) and value.endswith(suffix)


FILTERS = {"split": _split, "keys": _keys, "values": _values, "get": _get, "lines": _lines,
           "bool": _bool}
TESTS = {"startingwith": _starting_with, "endingwith": _ending_with}


def install(env: Environment) -> None:
    """Add NoETL's filters and tests to `env`; Jinja's own of the same name are kept."""
    for name, function in FILTERS.items():
        env.filters.setdefault(name, function)
    for name, test in TESTS.items():
        env.tests.setdefault(name, test)
