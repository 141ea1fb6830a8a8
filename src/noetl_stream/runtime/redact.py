"""Keeping secrets out of published events.

A tool marks the parts of its result that are secret with `Outcome.meta["redact"]`, a list of
dotted paths into the result (`["value"]`; `[""]` for the whole result). The pipeline collects the
values at those paths while it runs, so later tasks of the same step still see them; the worker
replaces every occurrence with `***` in the event it publishes (result, ctx patch, error), so
nothing downstream of the event stream, the router, watchers and `--json` included, ever holds them.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from noetl_stream.tools.base import Outcome

MASK = "***"
# A shorter secret is masked only where it is the whole string: masking every "ab" in a
# document would mangle it and reveal the secret's length and places anyway.
MIN_SUBSTRING_LEN = 4


def _leaves(value: Any) -> Iterable[str]:
    if isinstance(value, str):
        if value:
            yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from _leaves(v)
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from _leaves(v)
    elif value is not None and not isinstance(value, bool):
        yield str(value)


def secret_values(outcome: Outcome) -> set[str]:
    """The string values an outcome's `meta["redact"]` paths point at."""
    paths = outcome.meta.get("redact") or ()
    found: set[str] = set()
    for path in paths:
        node: Any = outcome.result
        for part in (p for p in str(path).split(".") if p):
            if isinstance(node, dict):
                node = node.get(part)
            elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
                node = node[int(part)]
            else:
                node = None
                break
        found.update(_leaves(node))
    return found


def _scrub_mapping(value: dict[Any, Any], secrets: set[str]) -> dict[Any, Any]:
    """Keys are masked like values (code may key a mapping by a token or a password). Two keys
    that mask alike stay apart as `***`, `***#2`, ... in their order, so no value is lost.
    """
    out: dict[Any, Any] = {}
    for key, item in value.items():
        masked = scrub(key, secrets) if isinstance(key, str) else key
        if masked != key:
            base, n = masked, 1
            while masked in out or masked in value:
                n += 1
                masked = f"{base}#{n}"
        out[masked] = scrub(item, secrets)
    return out


def scrub(value: Any, secrets: set[str]) -> Any:
    """`value` with every secret replaced by `***` (a copy; `value` is not changed)."""
    if not secrets:
        return value
    if isinstance(value, str):
        if value in secrets:
            return MASK
        for secret in secrets:
            if len(secret) >= MIN_SUBSTRING_LEN and secret in value:
                value = value.replace(secret, MASK)
        return value
    if isinstance(value, dict):
        return _scrub_mapping(value, secrets)
    if isinstance(value, (list, tuple)):
        return [scrub(v, secrets) for v in value]
    if isinstance(value, (int, float)) and not isinstance(value, bool) and str(value) in secrets:
        return MASK
    return value
