"""Two execution states compared field by field (what `noetl-stream verify` reports). Pure.

States are compared by what they hold, not by how a commit laid them out: results are compared
as values (a committed state names the large ones by key in KV `noetl_step_results`), step
records and loop results paged out of the state are compared with the others, and the outbox,
the last commit's messages, by msg id. `trace` (the span ids of the request that started it) and
`source_*` (where the server is in the events stream, server/source_copies.py) are no
consequence of the events and are left out, as is the format version a state was written in (a
state an earlier release committed holds what this one rebuilds).
"""

from __future__ import annotations

from dataclasses import dataclass

from noetl_stream import jsonutil
from noetl_stream.formats import VERSION_FIELD
from noetl_stream.jsonutil import JsonObject, JsonValue
from noetl_stream.router.state import ExecutionState, Outgoing

LEFT_OUT = ("outbox", "trace", "step_pages", "step_page_index", "result_key", "source_mark",
            "source_recent", VERSION_FIELD)
SHOWN = 160  # characters of a value shown in a difference


@dataclass(frozen=True)
class Difference:
    """The first field where the committed state and the rebuilt one differ."""

    field: str
    committed: JsonValue
    rebuilt: JsonValue

    def describe(self) -> str:
        return (f"{self.field}: committed {_short(self.committed)}, "
                f"rebuilt from events {_short(self.rebuilt)}")


def content(state: ExecutionState) -> JsonObject:
    """What a state holds, as plain JSON values, independent of how it was stored."""
    plain: JsonObject = jsonutil.loads(jsonutil.dumps(state))
    for name in LEFT_OUT:
        plain.pop(name, None)
    plain["result"] = state.result
    plain["steps"] = {name: {**{k: v for k, v in raw.items() if k != "result_key"},
                             "result": state.steps[name].result}
                      for name, raw in _objects(plain.get("steps"))}
    for run_id, raw in _objects(plain.get("runs")):
        loop, stored = state.runs[run_id].loop, raw.get("loop")
        if loop is not None and isinstance(stored, dict):
            stored.pop("pages", None)
            stored.pop("page_index", None)
            stored.pop("items_key", None)
            stored["results"] = loop.all_results()
    normal: JsonObject = jsonutil.loads(jsonutil.dumps(plain))
    return normal


def _objects(value: JsonValue) -> list[tuple[str, JsonObject]]:
    """The entries of a state's mapping (its steps, its runs): each one an object."""
    if not isinstance(value, dict):
        return []
    return [(key, entry) for key, entry in value.items() if isinstance(entry, dict)]


def first_difference(committed: JsonValue, rebuilt: JsonValue, path: str = "") -> Difference | None:
    """The first differing field, in the committed value's key order; None when equal."""
    if isinstance(committed, dict) and isinstance(rebuilt, dict):
        for key in [*committed, *(k for k in rebuilt if k not in committed)]:
            where = f"{path}.{key}" if path else str(key)
            if key not in rebuilt or key not in committed:
                return Difference(where, committed.get(key, "<absent>"),
                                  rebuilt.get(key, "<absent>"))
            found = first_difference(committed[key], rebuilt[key], where)
            if found is not None:
                return found
        return None
    if isinstance(committed, list) and isinstance(rebuilt, list) and len(committed) == len(rebuilt):
        for index, (a, b) in enumerate(zip(committed, rebuilt, strict=True)):
            found = first_difference(a, b, f"{path}[{index}]")
            if found is not None:
                return found
        return None
    return None if committed == rebuilt else Difference(path or "state", committed, rebuilt)


def outbox_difference(committed: list[Outgoing],
                      outboxes: list[list[Outgoing]]) -> Difference | None:
    """The committed outbox is what the last commit's events emitted: the outboxes of the last
    few applied events, in order. A command the server replaced by its step's failure (no worker
    serves its pool, server/pools.py) counts as that command.
    """
    want: list[JsonValue] = [_as_emitted(m) for m in committed]
    emitted: list[JsonValue] = []
    for outbox in reversed(outboxes):
        if len(emitted) >= len(want):
            break
        emitted = [*(m.msg_id for m in outbox), *emitted]
    if emitted == want or (not want and not emitted):
        return None
    return Difference("outbox", want, emitted)


def _as_emitted(message: Outgoing) -> str:
    # Only a step's outcome stands for a refused command: the execution.failed that follows
    # carries the same error kind and no step run.
    run, iteration = message.plain_body.get("step_run_id"), message.plain_body.get("iteration")
    if message.kind == "event" and message.plain_body.get("error", {}) and run is not None and \
            isinstance(message.plain_body.get("error"), dict) and \
            message.plain_body["error"].get("kind") == "pool":
        return f"cmd:{run}:{'-' if iteration is None else iteration}:1"
    return message.msg_id


def _short(value: JsonValue) -> str:
    try:
        text = jsonutil.dumps(value).decode()
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= SHOWN else text[:SHOWN] + "..."
