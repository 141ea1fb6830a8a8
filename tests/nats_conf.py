"""A reader of the subset of nats-server's configuration format the deploy files use (maps in
braces, lists in brackets, `key: value` or `key value` pairs, quoted and bare strings, `#`
comments, `$VAR` references kept as text), and a writer of a config from plain data as NATS's Helm
chart writes its `config.merge` (JSON, with `<< raw >>` strings written raw). For tests only.
"""

from __future__ import annotations

import json
import re
from typing import Any

_TOKEN = re.compile(r'\s*(?:(#[^\n]*)|("(?:[^"\\]|\\.)*")|([{}\[\]:,=])|([^\s{}\[\],=#"]+))')
_RAW = re.compile(r'"<< (.*?) >>"')


def _tokens(text: str) -> list[str]:
    out: list[str] = []
    pos = 0
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None or m.end() == pos:
            if text[pos:].strip():
                raise ValueError(f"cannot read the config at {text[pos:pos + 30]!r}")
            break
        pos = m.end()
        comment, quoted, punct, bare = m.groups()
        if comment is not None:
            continue
        out.append(quoted if quoted is not None else punct if punct is not None else bare)
    return out


def load(text: str) -> dict[str, Any]:
    """The config as plain data: numbers and sizes stay text, as written."""
    tokens = _tokens(text)
    value, _ = _map(tokens, 0, closing=None)
    return value


def _value(tokens: list[str], pos: int) -> tuple[Any, int]:
    tok = tokens[pos]
    if tok == "{":
        return _map(tokens, pos + 1, closing="}")
    if tok == "[":
        items: list[Any] = []
        pos += 1
        while tokens[pos] != "]":
            if tokens[pos] == ",":
                pos += 1
                continue
            item, pos = _value(tokens, pos)
            items.append(item)
        return items, pos + 1
    return (json.loads(tok) if tok.startswith('"') else tok), pos + 1


def _map(tokens: list[str], pos: int, closing: str | None) -> tuple[dict[str, Any], int]:
    out: dict[str, Any] = {}
    while pos < len(tokens) and tokens[pos] != closing:
        if tokens[pos] == ",":
            pos += 1
            continue
        written = tokens[pos]
        key = json.loads(written) if written.startswith('"') else written.removesuffix(":")
        pos += 1
        if not written.endswith(":") and tokens[pos] in (":", "="):
            pos += 1
        out[key], pos = _value(tokens, pos)
    return out, pos + 1


def dump(config: dict[str, Any]) -> str:
    """`config` as NATS's Helm chart writes it: JSON, each "<< x >>" string as x itself."""
    return _RAW.sub(lambda m: m.group(1), json.dumps(config, indent=2))
