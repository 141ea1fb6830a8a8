"""External signals: what any client publishes to a running execution, and how events are read
off the events stream.

A signal is published on `<prefix>.events.<execution_id>.signal.<name>` with the signal's data
as the JSON body (any JSON value, or nothing). The body is the client's, so it is never read as an
event envelope: it becomes `{"event_type": "signal.<name>", "execution_id", "data", "seq"}`, and
a field in it cannot pass itself off as, say, `execution.completed`. The router hands it to the
execution's listeners (`eval_mode: on_event`); one that nobody takes is recorded and ignored.
"""

from __future__ import annotations

import re
from typing import Any

from noetl_stream import ids, jsonutil
from noetl_stream.runtime.connection import Bus
from noetl_stream.runtime.timers import SCHEDULE_PREFIX, TIMER_FIRED, TIMER_SCHEDULED
from noetl_stream.subjects import Topology

SIGNAL_PREFIX = "signal."


def valid_signal_name(name: str) -> bool:
    """A signal name is one or more subject tokens: `approve`, `payment.settled`."""
    return all(ids.is_subject_token(part) for part in name.split("."))


def decode_event(topology: Topology, subject: str, data: bytes,
                 seq: int | None = None) -> dict[str, Any]:
    """The event a message on the events stream (or its copy in the router's stream) carries.
    Raises ValueError for a body that is not a JSON object where an event envelope is expected
    (signals may carry anything).
    """
    event_type = topology.event_type_of(subject)
    parts = topology.published_subject(subject).split(".", 3)
    execution_id = parts[2] if len(parts) > 2 else ""
    if event_type.startswith(SIGNAL_PREFIX):
        try:
            payload = jsonutil.loads(data) if data.strip() else None
        except ValueError:
            payload = data.decode(errors="replace")  # kept as text: the record shows what came
        event: dict[str, Any] = {"event_type": event_type, "execution_id": execution_id,
                                 "data": payload}
    else:
        event = jsonutil.loads(data)
        if not isinstance(event, dict):
            raise ValueError("event body is not an object")
        event.setdefault("event_type", event_type)
        event.setdefault("execution_id", execution_id)
        if event_type.startswith(SCHEDULE_PREFIX):
            # The body is the `timer.fired` the stream delivers at `fire_at`; this is the schedule.
            event["event_type"] = TIMER_SCHEDULED
    if seq is not None and (event_type.startswith(SIGNAL_PREFIX) or event_type == TIMER_FIRED):
        event["seq"] = seq  # lets a listener skip a redelivered signal or timer
    return event


async def publish_signal(bus: Bus, execution_id: str, name: str, data: Any, *,
                         msg_id: str | None = None) -> int:
    """Store a signal in the events stream; returns its stream sequence. With `msg_id`, a second
    publish with the same id within the duplicate window is dropped.
    """
    if not ids.is_subject_token(execution_id) or not valid_signal_name(name):
        raise ValueError(f'"{execution_id}" / "{name}": an execution id is one subject token and a '
                         "signal name one or more (letters, digits, - and _, joined by dots)")
    headers = {"Nats-Msg-Id": msg_id} if msg_id else None
    ack = await bus.js.publish(bus.topology.signal_subject(execution_id, name),
                               jsonutil.dumps(data), headers=headers)
    return int(ack.seq)


# A quoted event name in a listener's guard: `event.name == 'signal.approve'`.
_QUOTED_EVENT = re.compile(r"""['"]((?:signal|timer|step|loop|call|execution|child)\.[\w.\-]*)['"]""")


def awaited_signals(guards: list[str | None]) -> set[str] | None:
    """The signal names a listener's guards name; None when one guard names no event at all
    (an `else` rule, or a guard on the data only), since that rule may take any signal.
    """
    names: set[str] = set()
    for guard in guards:
        quoted = _QUOTED_EVENT.findall(guard or "")
        if not quoted:
            return None
        names.update(q[len(SIGNAL_PREFIX):] for q in quoted if q.startswith(SIGNAL_PREFIX))
    return names


async def why_unheard(bus: Bus, execution_id: str, name: str) -> str | None:
    """Why signal `name` would change nothing in `execution_id` now, read from its committed
    state: unknown, ended, or no listener whose guards name it. None when a listener may take it.
    """
    from nats.js.errors import KeyNotFoundError

    from noetl_stream.dsl import parse_playbook
    from noetl_stream.router.state import ExecutionState
    from noetl_stream.tools.registry import installed_kinds

    try:
        entry = await (await bus.js.key_value("noetl_executions")).get(execution_id)
    except KeyNotFoundError:
        entry = None
    if entry is None or not entry.value:
        return f"no execution {execution_id} is known"
    state = ExecutionState.from_dict(jsonutil.loads(entry.value))
    if state.status != "running":
        return f"execution {execution_id} already {state.status}; nothing listens any more"
    text = (await (await bus.js.key_value("noetl_catalog")).get(state.playbook_key)).value or b""
    playbook = parse_playbook(text.decode(), state.playbook_key, kinds=installed_kinds()).playbook
    waited: set[str] = set()
    for run in state.active_runs:
        step = playbook.step(run.step)
        if step.eval_mode != "on_event":
            continue
        names = awaited_signals([rule.when for rule in step.listen])
        if names is None or name in names:
            return None
        waited |= names
    if not waited:
        return f"no step of execution {execution_id} listens for signals now"
    return (f"no step of execution {execution_id} listens for signal.{name} now (listening for: "
            f"{', '.join(sorted(waited))})")
