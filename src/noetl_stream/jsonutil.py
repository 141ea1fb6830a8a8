"""JSON encoding shared by every message: orjson, with a fallback for odd Python values."""

from __future__ import annotations

from typing import Any

import orjson

_OPTS = orjson.OPT_NON_STR_KEYS | orjson.OPT_SERIALIZE_NUMPY


def _fallback(value: Any) -> Any:
    # Values a tool may hand back that JSON has no word for: keep them readable, never crash.
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    return str(value)


def dumps(value: Any) -> bytes:
    return orjson.dumps(value, default=_fallback, option=_OPTS)


def dumps_str(value: Any) -> str:
    return dumps(value).decode()


def loads(data: bytes | str) -> Any:
    return orjson.loads(data)


def loads_object(data: bytes | str) -> dict[str, Any] | None:
    """A JSON object from a message someone else wrote; None for anything else (a listener that
    only reads events must not fail on a body it does not understand).
    """
    try:
        value = loads(data)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def to_plain(value: Any) -> Any:
    """Round-trip through JSON so a value holds only JSON types."""
    return loads(dumps(value))
