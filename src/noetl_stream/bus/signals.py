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

from noetl_stream import event_decoding, jsonutil, messages
from noetl_stream.bus.connection import Bus
from noetl_stream.jsonutil import JsonObject, JsonValue
from noetl_stream.messages import SIGNAL_PREFIX
from noetl_stream.router_events import RouterEvent, router_event
from noetl_stream.subjects import Topology

__all__ = ["SIGNAL_PREFIX", "awaited_signals", "decode_event", "decode_event_body", "publish_signal",
           "valid_signal_name", "why_unheard"]


def valid_signal_name(name: str) -> bool:
    """A signal name is one or more safe tokens joined by dots, at most 128 characters:
    `approve`, `payment.settled`.
    """
    return messages.signal_name_problem(name) is None


def decode_event_body(topology: Topology, subject: str, data: bytes,
                      seq: int | None = None) -> JsonObject:
    """The body of the event a message on the events stream (or its copy in the router's
    stream) carries, as JSON, checked (event_decoding.py decode_event_body) under the subject it was
    published on. Raises messages.Malformed (a ValueError) for a message no reader may take: an
    identifier that is not one, a body that is not a JSON object where an event envelope is
    expected, or a body whose `execution_id` or `event_type` is not its subject's.
    """
    return event_decoding.decode_event_body(topology.prefix, topology.published_subject(subject), data,
                                      seq)


def decode_event(topology: Topology, subject: str, data: bytes,
                 seq: int | None = None) -> RouterEvent:
    """The event as the model of its type (router_events.py), checked as `decode_event_body`
    checks it; a body of a known type without its type's fields is Malformed too.
    """
    return router_event(decode_event_body(topology, subject, data, seq))


async def publish_signal(bus: Bus, execution_id: str, name: str, data: JsonValue, *,
                         msg_id: str | None = None) -> int:
    """Store a signal in the events stream; returns its stream sequence. With `msg_id`, a second
    publish with the same id within the duplicate window is dropped. Raises ValueError for an id,
    name or data no router would take, before anything is published.
    """
    problem = messages.execution_id_problem(execution_id) or messages.signal_name_problem(name) \
        or messages.bounded_json_problem(data)
    body = jsonutil.dumps(data) if problem is None else b""
    problem = problem or event_decoding.signal_size_problem(body)
    if problem is not None:
        raise ValueError(problem)
    headers = {"Nats-Msg-Id": msg_id} if msg_id else None
    ack = await bus.js.publish(bus.topology.signal_subject(execution_id, name), body,
                               headers=headers)
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
