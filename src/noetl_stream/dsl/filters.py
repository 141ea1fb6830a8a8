"""Template filters NoETL's engines register beyond Jinja's own, with their meaning there.

NoETL renders templates in three places: its server (`orchestrate-core/src/template.rs`), its
Rust tools and worker (`src/template/engine.rs` in noetl/tools) and its Python engine
(`noetl/core/dsl/render.py`). A playbook may use any filter one of them registers, so every
one is here. Where the engines disagree the worker's (the one rendering tool configs) wins,
since that is where a playbook's authors saw it work:

- `int` / `float` never fail: what does not read as a number is 0 (a missing name too);
- `length` / `len` count the characters of a string, the items of a list or mapping, and are 0
  for anything else;
- `default` / `d` replace a missing value and a null one;
- `fromjson` is null for text that is not JSON; `tojson` writes a missing value as `null`;
- `b64encode` encodes the value's text as UTF-8; `b64decode` fails on what is not base64 or
  not UTF-8 once decoded;
- minijinja's own `split`, `lines`, `bool` filters and `startingwith`, `endingwith`,
  `containing` tests, which Jinja lacks.

A field read of an undefined value (`a.b` with `a` missing) is missing to every filter, as in
NoETL's minijinja; every filter but `default` notes the read, so it is logged
(dsl/templating.py, `_ChainedRead`).
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable, Iterable, Mapping
from typing import Any, NoReturn

import orjson
from jinja2 import Undefined
from jinja2.exceptions import FilterArgumentError
from jinja2.filters import do_float, do_int


def _missing(value: object) -> bool:
    """Undefined and readable as missing; asking its truth notes a read of a field of an undefined
    value (dsl/templating.py `_ChainedRead`).
    """
    if isinstance(value, Undefined):
        bool(value)
        return True
    return False


def to_int(value: object, default: int = 0, base: int = 10) -> int:
    return default if _missing(value) else do_int(value, default, base)


def to_float(value: object, default: float = 0.0) -> float:
    return default if _missing(value) else do_float(value, default)


def length(value: object) -> int:
    if _missing(value):
        return 0
    if isinstance(value, (str, list, tuple, Mapping)):
        return len(value)
    if isinstance(value, Iterable):  # what `select`, `map`, ... hand on
        return sum(1 for _ in value)
    return 0


def default(value: object, default_value: object = "", boolean: bool = False) -> object:
    if isinstance(value, Undefined) or value is None or (boolean and not value):
        return default_value
    return value


def to_json(value: object) -> str:
    if _missing(value):
        return "null"
    return orjson.dumps(value, default=str).decode()


def from_json(value: object) -> object:
    if _missing(value):
        return None
    if not isinstance(value, (str, bytes)):
        return value
    try:
        return orjson.loads(value)
    except orjson.JSONDecodeError:
        return None


def _text(value: object) -> str:
    return "" if _missing(value) else value if isinstance(value, str) else str(value)


def b64encode(value: object) -> str:
    return base64.b64encode(_text(value).encode("utf-8")).decode("ascii")


def b64decode(value: object) -> str:
    try:
        raw = base64.b64decode(_text(value), validate=True)
    except (binascii.Error, ValueError) as exc:
        raise FilterArgumentError(f"b64decode: the value is not base64 ({exc})") from None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise FilterArgumentError("b64decode: the decoded bytes are not UTF-8 text") from None


def keys(value: object) -> list[object]:
    if not isinstance(value, Mapping):
        raise FilterArgumentError("keys needs a mapping")
    return list(value.keys())


def values(value: object) -> list[object]:
    if not isinstance(value, Mapping):
        raise FilterArgumentError("values needs a mapping")
    return list(value.values())


def get(value: object, key: object, fallback: object = None) -> object:
    if isinstance(value, Mapping):
        return value.get(key, fallback)
    if isinstance(value, (list, tuple)) and isinstance(key, int) and -len(value) <= key < len(value):
        return value[key]
    return fallback


def split(value: object, separator: str | None = None, max_splits: int = -1) -> list[str]:
    """NoETL's engines register `split` (Jinja has none): the text's parts, on whitespace when
    no separator is given.
    """
    return _text(value).split(separator, max_splits)


def lines(value: object) -> list[str]:
    return _text(value).splitlines()


def to_bool(value: object) -> bool:
    return not _missing(value) and bool(value)


def starting_with(value: object, prefix: str) -> bool:
    return isinstance(value, str) and value.startswith(prefix)


def ending_with(value: object, suffix: str) -> bool:
    return isinstance(value, str) and value.endswith(suffix)


def containing(value: Any, item: object) -> bool:
    try:
        return item in value
    except TypeError:
        return False


def encrypt_secret(value: object) -> NoReturn:
    raise FilterArgumentError(
        "encrypt_secret encrypts with NoETL's server key, which this runtime does not hold; keep "
        "the secret in the credential store (`noetl-stream credential set NAME ...`) and name it "
        "with `auth: NAME` or read it with `kind: secrets`")


FILTERS: dict[str, Callable[..., object]] = {
    "int": to_int, "float": to_float, "length": length, "len": length, "count": length,
    "default": default, "d": default, "tojson": to_json, "to_json": to_json,
    "fromjson": from_json, "from_json": from_json, "b64encode": b64encode,
    "b64decode": b64decode, "keys": keys, "values": values, "get": get,
    "encrypt_secret": encrypt_secret, "split": split, "lines": lines, "bool": to_bool,
}

# Tests minijinja (NoETL's Rust engines) has and Jinja lacks.
TESTS: dict[str, Callable[..., object]] = {"startingwith": starting_with, "endingwith": ending_with,
                         "containing": containing}
