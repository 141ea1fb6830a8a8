"""Reading what the event stream holds, for tests that check exactly-once properties.

A live subscriber sees every publish, duplicates included; the stream stores a message once per
`Nats-Msg-Id`. These helpers read the stream, so they see what the router and replays see.
"""

from __future__ import annotations

from nats.errors import TimeoutError as NatsTimeoutError
from nats.js import JetStreamContext
from nats.js.api import DeliverPolicy
from nats.js.errors import KeyNotFoundError

from noetl_stream import jsonutil
from noetl_stream.jsonutil import JsonObject
from noetl_stream.messages import split_outcome_pool
from noetl_stream.state.kv_keys import bucket_keys


async def stored_messages(js: JetStreamContext, subject: str, *, stream: str = "NOETL_EVENTS",
                          timeout_s: float = 5.0) -> list[tuple[str, bytes]]:
    """Every message the stream holds on `subject` (wildcards allowed), oldest first."""
    info = await js.stream_info(stream, subjects_filter=subject)
    expected = sum((info.state.subjects or {}).values())
    out: list[tuple[str, bytes]] = []
    if expected == 0:
        return out
    sub = await js.subscribe(subject, stream=stream, ordered_consumer=True,
                             deliver_policy=DeliverPolicy.ALL)
    try:
        while len(out) < expected:
            try:
                msg = await sub.next_msg(timeout=timeout_s)
            except NatsTimeoutError:
                break
            out.append((msg.subject, msg.data))
    finally:
        await sub.unsubscribe()
    return out


async def stored_events(js: JetStreamContext, execution_id: str, *,
                        prefix: str = "noetl") -> list[JsonObject]:
    """The execution's events as the stream holds them, each with its `event_type` filled in."""
    subject = f"{prefix}.events.{execution_id}.>"
    events: list[JsonObject] = []
    for msg_subject, data in await stored_messages(js, subject):
        event = jsonutil.loads_object(data)
        if event is not None:
            event.setdefault("event_type", split_outcome_pool(msg_subject.split(".", 3)[-1])[0])
            events.append(event)
    return events


async def child_states(js: JetStreamContext, parent_execution_id: str) -> list[JsonObject]:
    """The committed states of every execution whose parent is `parent_execution_id`."""
    kv = await js.key_value("noetl_executions")
    states: list[JsonObject] = []
    for key in await bucket_keys(js, "noetl_executions"):
        try:
            entry = await kv.get(key)
        except KeyNotFoundError:
            continue  # deleted since it was listed
        state = jsonutil.loads_object(entry.value or b"")
        if state is not None and state.get("parent_execution_id") == parent_execution_id:
            states.append(state)
    return states
