"""The slots of one concurrency group, as KV `noetl_concurrency` holds them (one entry per group,
changed only by revision-checked writes, server/admission.py). Pure: the decisions on a record.

    {"group": "etl/load[acme]", "holders": [{"id": ..., "since": ...}],
     "queue": [{"id": ..., "limit": 2, "on_limit": "queue", "since": ..., "evicts": ...}]}

`holders` are the executions that hold a slot (they run); `queue` the ones that wait, in the
order they start: first those that made room by cancelling an older execution (`evicts`), then
the others in arrival order. An entry carries its own limit (a trigger may set another than the
playbook), and the head of the line starts once fewer than its limit hold a slot.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field

from pydantic import BaseModel, ConfigDict, Field

from noetl_stream.jsonutil import JsonValue

BUCKET = "noetl_concurrency"


class Holder(BaseModel):
    model_config = ConfigDict(extra="ignore")
    id: str
    since: float  # when it took the slot (nats-server's clock)


class Waiting(BaseModel):
    model_config = ConfigDict(extra="ignore")
    id: str
    limit: int
    on_limit: str = "queue"
    since: float
    evicts: str | None = None  # the holder cancelled to make room for it (cancel_oldest)


class GroupRecord(BaseModel):
    model_config = ConfigDict(extra="ignore")
    schema_version: int = 1
    group: str
    holders: list[Holder] = Field(default_factory=list)
    queue: list[Waiting] = Field(default_factory=list)

    def holds(self, execution_id: str) -> bool:
        return any(h.id == execution_id for h in self.holders)

    def waiting(self, execution_id: str) -> Waiting | None:
        return next((w for w in self.queue if w.id == execution_id), None)


def key_of(group: str) -> str:
    """The KV key of a group (its name may hold any character a rendered key produced)."""
    return "g_" + hashlib.sha256(group.encode()).hexdigest()[:40]


@dataclass
class Outcome:
    """What a change to a record means for the executions: who may start now, who is cancelled
    (execution id -> reason), and whether the new one was refused (`skip`).
    """

    admitted: list[str] = field(default_factory=list)
    cancels: dict[str, str] = field(default_factory=dict)
    skipped: bool = False
    changed: bool = False


def admit_heads(record: GroupRecord, now: float, out: Outcome) -> None:
    """Start the head of the line while there is room under its limit."""
    while record.queue and len(record.holders) < record.queue[0].limit:
        head = record.queue.pop(0)
        record.holders.append(Holder(id=head.id, since=now))
        out.admitted.append(head.id)
        out.changed = True


def join(record: GroupRecord, execution_id: str, limit: int, on_limit: str,
         now: float) -> Outcome:
    """A new execution asks for a slot. Asking again (a redelivery) decides what it did."""
    out = Outcome()
    if record.holds(execution_id):
        out.admitted.append(execution_id)
        return out
    known = record.waiting(execution_id)
    if known is not None:
        if known.evicts is not None and record.holds(known.evicts):
            out.cancels[known.evicts] = _evicted(execution_id, known.limit)
        return out
    admit_heads(record, now, out)
    if not record.queue and len(record.holders) < limit:
        record.holders.append(Holder(id=execution_id, since=now))
        out.admitted.append(execution_id)
        out.changed = True
        return out
    if on_limit == "skip":
        out.skipped = True
        return out
    entry = Waiting(id=execution_id, limit=limit, on_limit=on_limit, since=now)
    if on_limit == "cancel_oldest":
        _make_room(record, entry, out)
    else:
        record.queue.append(entry)
    out.changed = True
    return out


def _make_room(record: GroupRecord, entry: Waiting, out: Outcome) -> None:
    """`cancel_oldest`: the oldest holder nobody is cancelling yet is cancelled and `entry` takes
    its slot when it ends; when every holder is already being cancelled, `entry` replaces the
    earlier execution that waits for one of those slots (the newest always wins).
    """
    targeted = {w.evicts for w in record.queue if w.evicts is not None}
    victim = next((h.id for h in record.holders if h.id not in targeted), None)
    evicting = [w for w in record.queue if w.evicts is not None]
    if victim is not None:
        entry.evicts = victim
        record.queue.insert(len(evicting), entry)
        out.cancels[victim] = _evicted(entry.id, entry.limit)
        return
    if evicting:
        replaced = evicting[0]
        entry.evicts = replaced.evicts
        record.queue[record.queue.index(replaced)] = entry
        out.cancels[replaced.id] = (f"a newer execution ({entry.id}) took its place in line "
                                    f"(concurrency limit {entry.limit}, on_limit: cancel_oldest)")
        return
    record.queue.append(entry)


def _evicted(newer: str, limit: int) -> str:
    return (f"cancelled to make room for a newer execution ({newer}): concurrency limit "
            f"{limit} reached (on_limit: cancel_oldest)")


def leave(record: GroupRecord, execution_id: str, now: float) -> Outcome:
    """An execution ended: its slot, or its place in line, goes to the next one."""
    out = Outcome()
    before = len(record.holders) + len(record.queue)
    record.holders = [h for h in record.holders if h.id != execution_id]
    record.queue = [w for w in record.queue if w.id != execution_id]
    out.changed = len(record.holders) + len(record.queue) != before
    admit_heads(record, now, out)
    return out


def skip_reason(group: str, limit: int, holders: int) -> str:
    return (f"not started: {holders} execution(s) of {group} already run and the concurrency "
            f"limit is {limit} (on_limit: skip)")


def encode(record: GroupRecord) -> bytes:
    return record.model_dump_json().encode()


def decode(data: bytes | None, group: str) -> GroupRecord:
    return GroupRecord.model_validate_json(data) if data else GroupRecord(group=group)


def fields_of(event: Mapping[str, JsonValue]) -> tuple[str, int, str] | None:
    """(group, limit, on_limit) of a `concurrency.*` event, or None when it has none."""
    group, limit, on_limit = event.get("group"), event.get("limit"), event.get("on_limit")
    if not isinstance(group, str) or not isinstance(limit, int) or isinstance(limit, bool):
        return None
    return group, limit, on_limit if isinstance(on_limit, str) else "queue"
