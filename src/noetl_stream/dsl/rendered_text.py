"""The value of text a template renders, as NoETL's engines read it.

A template that is one expression (`"{{ rows }}"`) gives its value; when that value is text, and
always for text built from several parts (`"[{{ a }}, {{ b }}]"`, `'{"id": {{ n }}}'`,
`"{{ a }}{{ b }}"`), NoETL's server (`render_to_value`) and its Rust tools (`render_value`) read
the text back as a value when it spells one: a JSON object or list, `true` / `false`, a whole or
decimal number, `null` / `None` (its Python engine does so for text of several parts). This
runtime reads it the same way, so a task receives `[1, 2]` where NoETL hands it a list and 42
for `"{{ s }}"` with `s: "42"`. Pure.

NoETL's server leaves a template that reads `keychain` to its worker, whose tools read the text
as JSON only: there `"007"` and `"True"` stay text (`value_of_json_text`), where the server reads
7 and true.
"""

from __future__ import annotations

import math
import re

import orjson

_INTEGER = re.compile(r"[+-]?\d+")
_DECIMAL = re.compile(r"[+-]?(\d+\.\d*|\.\d+|\d+(\.\d*)?[eE][+-]?\d+)")
_I64_MIN, _I64_MAX = -(2**63), 2**63 - 1
_WORDS: dict[str, object] = {"true": True, "false": False, "null": None, "none": None}


def value_of_text(text: str) -> object:
    """`text`, or the value it spells; text that spells none (or a container that is not valid
    JSON) stays text.
    """
    trimmed = text.strip()
    if not trimmed:
        return text
    if (trimmed[0], trimmed[-1]) in (("[", "]"), ("{", "}")):
        try:
            return orjson.loads(trimmed)
        except orjson.JSONDecodeError:
            return text
    word = trimmed.lower()
    if word in _WORDS:
        return _WORDS[word]
    integer = _INTEGER.fullmatch(trimmed) is not None
    if integer and len(trimmed) <= 20 and _I64_MIN <= (whole := int(trimmed)) <= _I64_MAX:
        return whole
    if integer or _DECIMAL.fullmatch(trimmed):
        # A whole number past 64 bits is a float there (Rust's i64 parse fails, f64's does not).
        number = float(trimmed)
        return number if math.isfinite(number) else text
    return text


def value_of_json_text(text: str) -> object:
    """`text` as JSON when it is JSON (NoETL's tools: `serde_json::from_str`), else `text`."""
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        return text
