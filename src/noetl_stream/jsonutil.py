"""JSON encoding shared by every message: orjson, with a fallback for odd Python values."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol, TypeAlias, overload, runtime_checkable

import orjson
from pydantic import JsonValue

# What a playbook's YAML, a message body, a payload and a stored result are made of once decoded.
# A value typed this way must be narrowed (isinstance) before it is indexed, which is the point:
# it comes from someone else. `object` is for values a tool hands back before they are encoded.
JsonObject: TypeAlias = dict[str, JsonValue]

__all__ = ["Encodable", "JsonObject", "JsonValue", "dumps", "dumps_str", "loads", "loads_object", "to_plain"]

_OPTS = orjson.OPT_NON_STR_KEYS | orjson.OPT_SERIALIZE_NUMPY


@runtime_checkable
class Encodable(Protocol):
    """A typed value that encodes as the JSON it stands for (messages.Command): orjson cannot
    read a pydantic model, and pydantic's own dump would copy every value it holds first.
    """

    def encoded(self) -> object:
        """The value as JSON-ready Python values, nested typed values left to encode in turn."""
        ...


# type -> whether it is Encodable: a Protocol's isinstance looks at each member every time, and
# every command the router publishes passes here (its context and tasks too).
_ENCODABLE: dict[type, bool] = {}


def _fallback(value: Any) -> Any:
    encodable = _ENCODABLE.get(type(value))
    if encodable is None:
        encodable = _ENCODABLE[type(value)] = isinstance(value, Encodable)
    if encodable:
        return value.encoded()
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


@overload
def to_plain(value: Mapping[str, object]) -> JsonObject: ...


@overload
def to_plain(value: object) -> JsonValue: ...


def to_plain(value: object) -> JsonValue:
    """Round-trip through JSON so a value holds only JSON types (a mapping stays an object)."""
    plain: JsonValue = loads(dumps(value))
    return plain


# orjson refuses values nested deeper than this many containers; a value a step produces may use
# MAX_DEPTH of them, the rest is left for what holds it (an event, the execution's state).
_ENCODER_DEPTH = 254
MAX_DEPTH = 200


_ALWAYS_STORABLE = (bool, float)


def storable_problem(value: Any, max_depth: int = MAX_DEPTH) -> str | None:
    """Why `value` cannot travel in an event or be stored in an execution's state, or None: an
    integer beyond 64 bits, or more than `max_depth` levels of nesting (at most 254).
    """
    if value is None or type(value) in _ALWAYS_STORABLE or (type(value) in (dict, list)
                                                           and not value):
        return None  # nothing to encode: most steps' results and ctx patches
    wrapped = value
    for _ in range(_ENCODER_DEPTH - max_depth):
        wrapped = [wrapped]
    try:
        dumps(wrapped)
    except TypeError as exc:
        text = str(exc)
        if "64-bit" in text:
            return "it holds an integer beyond 64 bits (JSON here holds 64-bit integers; " \
                   "pass a larger number as a string)"
        if "ecursion" in text:
            return f"it is nested more than {max_depth} levels deep"
        return f"it cannot be encoded as JSON: {text}"
    return None
