"""An execution's state rebuilt from its recorded events, as the server built it (no I/O).

The server starts an execution with `router.start()` and then applies, in stream order, every
event NOETL_ROUTER copies from the events stream (outcomes, signals, fired timers, cancel and
restart requests, children's starts), each with its own clock reading as `now`; a group handed
back for redelivery comes after later events, in the order the state's marks record
(server/applied_order.py). The router is
pure, so the same playbook, the same events and the same `now`s give the same state. The clock
readings are not inputs the server keeps apart; they are found in what each application emitted:
every event the router publishes carries the `timestamp` it was applied at, and a timer's
schedule message its `set_at`. Applying an event therefore first tries the previous reading on a
copy, looks up the messages that copy emitted in the recorded log by their deterministic msg
ids, and applies again with the recorded time when it differs. An application that emitted
nothing recorded changed no time in the state, so the previous reading serves.

Like the server (`Server._apply_until_fault`), an event whose application raises fails the
execution with the reason instead.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial

from noetl_stream import router
from noetl_stream.dsl.models import Playbook
from noetl_stream.jsonutil import JsonObject
from noetl_stream.messages import TIMER_FIRED, TIMER_SCHEDULED, Malformed
from noetl_stream.router.state import ExecutionState, Outgoing
from noetl_stream.router_events import RouterEvent, router_event
from noetl_stream.server.applied_order import in_applied_order
from noetl_stream.server.state_codec import fault
from noetl_stream.server.versions import playbook_for
from noetl_stream.subjects import Topology

STARTED = "execution.started"
Observer = Callable[[JsonObject, ExecutionState], None]


@dataclass
class Rebuilt:
    """The rebuilt state and, per applied event, the messages its application emitted."""

    state: ExecutionState
    outboxes: list[list[Outgoing]] = field(default_factory=list)


def router_event_types(topology: Topology) -> tuple[frozenset[str], tuple[str, ...], frozenset[str]]:
    """The event types the server applies (exact ones, and prefixes such as `signal.`), read from
    the subjects NOETL_ROUTER copies from the events stream, and those of them copied only from
    a pool-bound subject (`step.done.*`: a worker's outcome, not the router's own `step.done`).
    """
    exact: set[str] = set()
    prefixes: list[str] = []
    pooled: set[str] = set()
    for stream in topology.streams:
        if stream.source is None:
            continue
        for subject in stream.source_subjects:
            parts = subject.split(".", 3)  # <prefix>.events.*.<type>
            if len(parts) < 4:
                continue
            etype = parts[3].removesuffix(".*")
            if etype != parts[3]:
                pooled.add(etype)
            if etype.endswith(">"):
                prefixes.append(etype[:-1])
            else:
                exact.add(etype)
    return frozenset(exact), tuple(prefixes), frozenset(pooled)


def applied_events(events: Iterable[JsonObject], topology: Topology) -> list[JsonObject]:
    """The events of a log the server applied, in order, each once (the stream's duplicate
    window drops a second publish of one msg id; a timer's schedule is not the timer; an
    outcome type counts only from a worker's pool-bound subject, whose pool decoding keeps).
    """
    exact, prefixes, pooled = router_event_types(topology)

    def applied(e: JsonObject) -> bool:
        etype = str(e.get("event_type"))
        if etype in pooled:
            return bool(e.get("pool"))
        return etype in exact or any(etype.startswith(p) for p in prefixes)

    return [e for e in events if applied(e)]


def recorded_times(events: Iterable[JsonObject]) -> dict[str, float]:
    """The `now` each recorded msg id was produced at: an event's `timestamp`, a timer's `set_at`.

    A fired timer carries its schedule's msg id and `set_at`, and is stamped with the time it
    fired: once nats-server has fired a schedule and dropped its message, the fired copy is the
    only record of that id, and the router produced it at `set_at`, not when it fired.
    """
    times: dict[str, float] = {}
    for e in events:
        msg_id = e.get("event_id")
        if not isinstance(msg_id, str):
            continue
        timer = e.get("event_type") in (TIMER_SCHEDULED, TIMER_FIRED) and "set_at" in e
        stamp = e.get("set_at") if timer else e.get("timestamp")
        if isinstance(stamp, (int, float)) and not isinstance(stamp, bool):
            times.setdefault(msg_id, float(stamp))
    return times


def rebuild(playbook: Playbook, events: list[JsonObject], topology: Topology, *,
            playbook_key: str, parent_iter: JsonObject | None = None,
            applied: int | None = None,
            versions: Mapping[str, Playbook] | None = None,
            observe: Observer | None = None,
            origins: Sequence[int | None] | None = None,
            recent: Sequence[int] = ()) -> Rebuilt | None:
    """The state the recorded `events` (the whole log, in stream order) imply; None when the log
    holds no `execution.started` (the execution was rejected, or its log has expired).

    With `applied` (the committed state's count of applied events), the rebuild stops before
    the first event that would take its count past it: an event stored after the state was read
    and not applied yet (a live execution) is not the state's.

    With `origins` (each event's NOETL_EVENTS sequence) and `recent` (the committed state's
    `source_recent`), the events are applied in the order the server applied them
    (server/applied_order.py), which a hand-back or a redelivery may have made another than
    the stream's.
    """
    started = next((e for e in events if e.get("event_type") == STARTED), None)
    if started is None:
        return None
    times = recorded_times(events)
    stamp = started.get("timestamp")
    if not isinstance(stamp, (int, float)):
        raise ValueError(f"the recorded execution.started of {started.get('execution_id')} "
                         f"carries no timestamp (found {stamp!r})")
    now = float(stamp)
    state = _start(playbook, started, playbook_key, parent_iter, now)
    rebuilt = Rebuilt(state, [list(state.outbox)])
    if observe is not None:
        observe(started, state)
    known = {**(versions or {}), playbook_key: playbook}
    ordered = events if origins is None else in_applied_order(events, origins, recent)
    for recorded in applied_events(ordered, topology):
        try:
            decoded = router_event(recorded)
        except Malformed:
            continue  # the server refused it as it came (router_events.py): never applied
        chosen, event = playbook_for(playbook, known, decoded)
        following, now = _apply_recorded(
            chosen, state if applied is None else copy_state(state), event, now, times)
        if applied is not None and following.applied > applied:
            break
        state = following
        playbook = known.get(state.playbook_key, playbook)
        rebuilt.outboxes.append(list(state.outbox))
        if observe is not None:
            observe(recorded, state)
    rebuilt.state = state
    return rebuilt


def _start(playbook: Playbook, started: JsonObject, key: str,
           parent_iter: JsonObject | None, now: float) -> ExecutionState:
    execution_id = str(started["execution_id"])
    workload = started.get("workload")
    workload = workload if isinstance(workload, dict) else {}
    parent = started.get("parent_execution_id")
    parent = parent if isinstance(parent, str) else None
    seed = started.get("replay")
    start = partial(router.start_replay, seed=seed) if isinstance(seed, dict) else router.start
    labels = _labels(started)
    try:
        return start(playbook, execution_id=execution_id, playbook_key=key,
                     workload=workload, now=now, parent_execution_id=parent,
                     parent_iter=parent_iter, concurrency=_concurrency(started), labels=labels,
                     playbook_file=_file(started))
    except Exception as exc:  # as the server does: an execution that failed at once
        state = ExecutionState(execution_id=execution_id, playbook_key=key, workload=workload,
                               playbook_path=playbook.path, playbook_name=playbook.name,
                               parent_execution_id=parent, parent_iter=parent_iter,
                               started_at=now, labels=labels)
        router.abort(playbook, state, "the start of the execution", fault(exc), now)
        return state


def _labels(started: JsonObject) -> dict[str, str]:
    """The request's labels, as its `execution.started` says; none in a log written before
    the event carried them.
    """
    value = started.get("labels")
    if not isinstance(value, dict):
        return {}
    return {str(k): str(v) for k, v in value.items()}


def _file(started: JsonObject) -> str | None:
    """The file the request named, as its `execution.started` says; None in a log written
    before the event carried it (the server's state then has none either).
    """
    value = started.get("file")
    return value if isinstance(value, str) else None


def _concurrency(started: JsonObject) -> JsonObject | None:
    """The concurrency limit the execution started under, as its `execution.started` says."""
    value = started.get("concurrency")
    return value if isinstance(value, dict) else None


def _apply_recorded(playbook: Playbook, state: ExecutionState, event: RouterEvent,
                    guess: float, times: dict[str, float]) -> tuple[ExecutionState, float]:
    """`event` applied at the time the server applied it; also that time."""
    trial = _applied(playbook, copy_state(state), event, guess)
    # The latest: a progress event the stream dropped as a duplicate of an earlier one (a step
    # skipped again after a restart) is recorded with the earlier time.
    now = max((times[m.msg_id] for m in trial.outbox if m.msg_id in times), default=guess)
    if now == guess:
        return trial, now
    return _applied(playbook, state, event, now), now


def _applied(playbook: Playbook, state: ExecutionState, event: RouterEvent,
             now: float) -> ExecutionState:
    before = copy_state(state)
    try:
        router.apply(playbook, state, event, now)
        state.to_json()  # a state JSON cannot hold fails the execution, as on the server
        return state
    except Exception as exc:
        step = getattr(event, "step", None)
        router.abort(playbook, before, router.cause_of(event),
                     {**fault(exc), "event": event.event_type,
                      **({"step": step} if isinstance(step, str) else {})}, now)
        return before


def copy_state(state: ExecutionState) -> ExecutionState:
    """An independent copy, results included (inline: nothing is stored here)."""
    return ExecutionState.from_dict(state.to_dict())
