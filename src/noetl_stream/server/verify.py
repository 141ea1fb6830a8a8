"""`noetl-stream verify`: prove that an execution's committed state is what its events say.

The events stream holds the truth; KV `noetl_executions` holds what the server made of it. This
rebuilds the state from the events (server/replay.py), reads the committed one with the results
and pages it names, and compares them field by field (server/state_diff.py); a finished
execution's summary in its last `execution.<status>` event is compared with the rebuilt state's
summary too.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Literal

from nats.js.errors import KeyNotFoundError

from noetl_stream import jsonutil
from noetl_stream.bus import stream_reads
from noetl_stream.bus.connection import Bus
from noetl_stream.bus.event_feed import EVENTS_STREAM
from noetl_stream.bus.signals import decode_event_body
from noetl_stream.dsl import parse_playbook
from noetl_stream.dsl.models import Playbook
from noetl_stream.jsonutil import JsonObject
from noetl_stream.messages import execution_id_problem
from noetl_stream.router.restart import RESTARTED
from noetl_stream.router.state import ExecutionState
from noetl_stream.server.replay import rebuild
from noetl_stream.server.retention import EXECUTIONS_BUCKET
from noetl_stream.server.state_diff import Difference, content, first_difference, outbox_difference
from noetl_stream.server.versions import named_versions, readable_versions
from noetl_stream.state.kv_keys import bucket_keys
from noetl_stream.state.results import ResultStore
from noetl_stream.state.step_results import StepResults
from noetl_stream.subjects import TERMINAL_EXECUTION_EVENTS
from noetl_stream.tools.registry import installed_kinds

Outcome = Literal["equal", "different", "unknown"]
SUMMARY_FIELDS = ("status", "result", "error", "steps", "ctx", "vars")
FETCH = 500  # events fetched at a time


@dataclass(frozen=True)
class Verdict:
    execution_id: str
    outcome: Outcome
    detail: str = ""  # the first difference, or why the execution is unknown
    events: int = 0  # events read from its log

    def as_json(self) -> JsonObject:
        return {"execution_id": self.execution_id, "outcome": self.outcome,
                "detail": self.detail, "events": self.events}


async def committed_state(bus: Bus, execution_id: str,
                          step_results: StepResults) -> ExecutionState | None:
    kv = await bus.js.key_value(EXECUTIONS_BUCKET)
    try:
        entry = await kv.get(execution_id)
    except KeyNotFoundError:
        return None
    if not entry.value:
        return None
    state = ExecutionState.from_dict(jsonutil.loads(entry.value))
    await step_results.load(state)
    return state


@dataclass(frozen=True)
class History:
    """What a rebuild of an execution starts from: its committed state, its log (each event with
    its sequence in the events stream), the playbook version it started with (`first`; its parse
    None when noetl_catalog no longer holds it) and the later versions the catalog still holds.
    """

    state: ExecutionState
    sequenced: list[tuple[int, JsonObject]]
    first: str
    playbook: Playbook | None
    versions: dict[str, Playbook]

    @property
    def events(self) -> list[JsonObject]:
        return [body for _, body in self.sequenced]


async def recorded_history(bus: Bus, execution_id: str,
                           step_results: StepResults) -> History | None:
    """The history of `execution_id` as verify, the marking scrubber and shadow replay rebuild
    it; None for an execution without a committed state.
    """
    state = None if execution_id_problem(execution_id) else \
        await committed_state(bus, execution_id, step_results)
    if state is None:
        return None
    sequenced = await read_sequenced_log(bus, execution_id)
    events = [body for _, body in sequenced]
    first = first_version(events, state.playbook_key)
    catalog = await bus.js.key_value("noetl_catalog")

    async def load(key: str) -> Playbook:
        text = bytes((await catalog.get(key)).value or b"").decode()
        return parse_playbook(text, key, kinds=installed_kinds()).playbook

    try:
        playbook = await load(first)
    except KeyNotFoundError:
        return History(state, sequenced, first, None, {})
    versions = await readable_versions(named_versions((None, e) for e in events), load)
    return History(state, sequenced, first, playbook, versions)


async def verify(bus: Bus, execution_id: str) -> Verdict:
    results = ResultStore(bus.js)
    history = await recorded_history(bus, execution_id, StepResults(bus.js, results))
    if history is None:
        return Verdict(execution_id, "unknown", f"no committed state of execution {execution_id}"
                       f" in {EXECUTIONS_BUCKET} (unknown, or removed by retention)")
    committed, events, first = history.state, history.events, history.first
    if history.playbook is None:
        return Verdict(execution_id, "unknown", f"its playbook {first} is no "
                       "longer in noetl_catalog", len(events))
    rebuilt = rebuild(history.playbook, events, bus.topology, playbook_key=first,
                      parent_iter=committed.parent_iter, applied=committed.applied,
                      origins=[seq for seq, _ in history.sequenced],
                      recent=committed.source_recent, versions=history.versions)
    if rebuilt is None:
        return Verdict(execution_id, "unknown", "its log holds no execution.started (expired "
                       "from the events stream?)", len(events))
    difference = (first_difference(content(committed), content(rebuilt.state))
                  or outbox_difference(committed.outbox, rebuilt.outboxes)
                  or await _summary_difference(events, rebuilt.state, results))
    if difference is not None:
        return Verdict(execution_id, "different", difference.describe(), len(events))
    return Verdict(execution_id, "equal", "", len(events))


def first_version(events: list[JsonObject], current: str) -> str:
    """The playbook version the execution started with: the one its first change of version
    (`execution.restarted` of `restart --latest`) left, else the one it runs now.
    """
    for e in events:
        previous = e.get("previous_playbook_key")
        if e.get("event_type") == RESTARTED and isinstance(previous, str) and previous:
            return previous
    return current


async def _summary_difference(events: list[JsonObject], state: ExecutionState,
                              results: ResultStore) -> Difference | None:
    """The last `execution.<status>` event's summary against the rebuilt state's."""
    if state.status == "running":
        return None
    ended = [e for e in events if e.get("event_type") in TERMINAL_EXECUTION_EVENTS]
    if not ended:
        return Difference("execution.completed", "<absent>", f"execution.{state.status}")
    last = ended[-1]
    summary = jsonutil.loads(jsonutil.dumps(state.summary()))
    # Both resolved: a result the worker stored in the object store is a reference in the state
    # and may be one in the event (the event's `steps` may itself have been moved out whole).
    recorded = {name: await results.resolve(last.get(name)) for name in SUMMARY_FIELDS}
    wanted = {name: await results.resolve(summary.get(name)) for name in SUMMARY_FIELDS}
    found = first_difference(recorded, wanted)
    if found is None:
        return None
    return Difference(f"{last.get('event_type')}.{found.field}", found.committed, found.rebuilt)


async def read_log(bus: Bus, execution_id: str) -> list[JsonObject]:
    """Every event the stream holds for the execution, oldest first, as the server decodes them
    (signals and fired timers carry their stream sequence); messages it refuses are left out.
    """
    return [body for _, body in await read_sequenced_log(bus, execution_id)]


async def read_sequenced_log(bus: Bus, execution_id: str) -> list[tuple[int, JsonObject]]:
    """`read_log`, each event with its sequence in the events stream (the origin a state's
    `source_recent` names, server/applied_order.py).
    """
    config = stream_reads.reader("verify", bus.topology.execution_events_filter(execution_id))
    events: list[tuple[int, JsonObject]] = []
    for msg in await stream_reads.read(bus, EVENTS_STREAM, config, batch=FETCH):
        seq = int(msg.metadata.sequence.stream)
        with contextlib.suppress(ValueError):  # refused by the server as well
            events.append((seq, decode_event_body(bus.topology, msg.subject, msg.data, seq)))
    return events


async def execution_ids(bus: Bus, *, since: float | None = None) -> list[str]:
    """Every execution with a committed state; with `since`, those started at or after it."""
    ids: list[str] = []
    kv = await bus.js.key_value(EXECUTIONS_BUCKET)
    for key in sorted(await bucket_keys(bus.js, EXECUTIONS_BUCKET)):
        if since is not None:
            try:
                entry = await kv.get(key)
            except KeyNotFoundError:
                continue
            started = jsonutil.loads(entry.value or b"{}").get("started_at", 0.0)
            if not isinstance(started, (int, float)) or started < since:
                continue
        ids.append(key)
    return ids
