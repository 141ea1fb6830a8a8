"""Part of the `python` tool's child (tools/python_runner.py): the values that cross its pipe.

JSON in and out (orjson), a list result read by the code as NoETL hands it over (`ListView`), and
the tail of what the code prints (`TailBuffer`). Like every part of the runner it imports nothing
of noetl_stream: the child runs it as source, wherever the package is installed.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import orjson


def dumps(value: object) -> bytes:
    # Subclasses pass through to _fallback, so a ListView the code hands back is its list again.
    return orjson.dumps(value, default=_fallback,
                        option=orjson.OPT_NON_STR_KEYS | orjson.OPT_PASSTHROUGH_SUBCLASS)


loads: Callable[[bytes], Any] = orjson.loads


def _fallback(value: object) -> object:
    if isinstance(value, ListView):
        return value.items_list()
    if isinstance(value, dict):
        return dict(value)
    if isinstance(value, (set, frozenset, tuple, list)):
        return list(value)
    if isinstance(value, bool):
        return bool(value)
    if isinstance(value, int):
        return int(value)
    if isinstance(value, str):
        return str(value)
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    return str(value)


OUTPUT_TAIL_BYTES = 64 * 1024  # kept per stream and request; the total size is reported too


class TailBuffer(io.TextIOBase):
    """A text stream that keeps only its last `limit` bytes (UTF-8) and counts all it was given,
    so a script printing gigabytes costs the worker no more than `limit`.
    """

    def __init__(self, limit: int = OUTPUT_TAIL_BYTES) -> None:
        super().__init__()
        self.limit = limit
        self.total = 0
        self._parts: list[bytes] = []
        self._held = 0

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        data = text.encode("utf-8", errors="replace")
        self.total += len(data)
        self._parts.append(data)
        self._held += len(data)
        if self._held > 2 * self.limit:  # trimmed now and then, not on every write
            self._trim()
        return len(text)

    def _trim(self) -> None:
        joined = b"".join(self._parts)[-self.limit:]
        self._parts, self._held = [joined], len(joined)

    def tail(self) -> str:
        self._trim()
        # A cut may fall inside a multi-byte character: drop its remains rather than fail.
        return b"".join(self._parts).decode("utf-8", errors="ignore")


def captured_output(out: TailBuffer, err: TailBuffer) -> dict[str, str | int | bool]:
    return {"stdout": out.tail(), "stderr": err.tail(), "stdout_bytes": out.total,
            "stderr_bytes": err.total,
            "truncated": out.total > out.limit or err.total > err.limit}


LIST_MARK = "__noetl_list_view__"


class ListView(dict[str, Any]):
    """A list result that NoETL hands to python code as a mapping: a loop's `{results, count,
    stats}`, an http list body's `{data, body, status_code, headers}` (playbooks test
    `isinstance(x, dict)` and read `x["stats"]`, `x.get("data")`). Code written for a list still
    works: it iterates, counts, indexes and slices the items, and compares equal to their list;
    a result that contains it carries the list. The runner imports nothing of noetl_stream, so
    dsl/values.py's ListView (a list with names) is mirrored here by its mapping twin.
    """

    def __init__(self, items: list[Any], names: dict[str, Any], itself: list[str]) -> None:
        super().__init__({**names, **{name: list(items) for name in itself}})
        self._items = list(items)

    def items_list(self) -> list[Any]:
        return list(self._items)

    def __iter__(self) -> Iterator[Any]:
        items: list[Any] = self._items
        return iter(items)

    def __len__(self) -> int:
        return len(self._items)

    def __reversed__(self) -> Iterator[Any]:
        return iter(self._items[::-1])

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, (int, slice)):
            return self._items[key]
        return super().__getitem__(key)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, list):
            return self._items == other
        return super().__eq__(other)

    __hash__ = None

    def __repr__(self) -> str:
        return repr(self._items)

    def index(self, value: Any, *args: Any) -> int:
        return self._items.index(value, *args)


def _decode(value: object) -> object:
    if isinstance(value, dict) and LIST_MARK in value:
        return ListView(value[LIST_MARK], value.get("names") or {}, value.get("itself") or [])
    return value


def decode_inputs(inputs: Mapping[str, object]) -> dict[str, object]:
    return {k: _decode(v) for k, v in inputs.items()}
