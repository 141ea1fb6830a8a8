"""The events the router applies, as typed models: `decode_event` reads one off the events
stream, `router_event` takes a body read back from a log or built in memory.

Each type NOETL_ROUTER copies for the router (subjects/topology.yaml) decodes to its model in
events.py (a signal to messages.py `SignalEvent`), discriminated by `event_type`; any other type
decodes to the envelope `Event` alone, which only a listener hears. A body of a known type that
lacks a field of its type, or holds one of another shape, is Malformed (`schema`): the server
dead-letters and terminates it (bus/dispositions.py) and never applies it.

Pure: no clock, no I/O (the router imports it).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated

from pydantic import Discriminator, Tag, TypeAdapter, ValidationError

from noetl_stream import events
from noetl_stream.event_decoding import decode_event_body
from noetl_stream.messages import (
    OUTCOME_EVENTS,
    SIGNAL_PREFIX,
    TIMER_FIRED,
    Malformed,
    SignalEvent,
)

# The types NOETL_ROUTER copies for the router (subjects/topology.yaml): each decodes to its model
# (events.py); a signal to SignalEvent; any other type to the envelope alone.
_MODEL_OF_TYPE: dict[str, str] = {
    **dict.fromkeys(OUTCOME_EVENTS, "outcome"), TIMER_FIRED: "timer",
    "execution.cancel.requested": "cancel", "execution.restart.requested": "restart",
    "execution.replayed": "replayed", "child.started": "child",
    "execution.admitted": "admitted"}


def _model_tag(value: object) -> str:
    """The union member an event body (or an event already decoded) is: by its `event_type`."""
    etype = value.get("event_type") if isinstance(value, dict) else getattr(value, "event_type", None)
    if not isinstance(etype, str):
        return "other"
    if etype.startswith(SIGNAL_PREFIX):
        return "signal"
    return _MODEL_OF_TYPE.get(etype, "other")


RouterEvent = Annotated[
    Annotated[events.OutcomeEvent, Tag("outcome")]
    | Annotated[SignalEvent, Tag("signal")]
    | Annotated[events.TimerFired, Tag("timer")]
    | Annotated[events.CancelRequested, Tag("cancel")]
    | Annotated[events.RestartRequested, Tag("restart")]
    | Annotated[events.Replayed, Tag("replayed")]
    | Annotated[events.ChildStarted, Tag("child")]
    | Annotated[events.ExecutionAdmitted, Tag("admitted")]
    | Annotated[events.Event, Tag("other")],
    Discriminator(_model_tag)]
"""An event as the router takes it, discriminated by `event_type`: a worker's outcome, a signal,
a fired timer, a cancel or restart request, a replay's link, a child's start, an admission, or
(any other type) the envelope alone, which only listeners hear.
"""
_ROUTER_EVENTS: TypeAdapter[RouterEvent] = TypeAdapter(RouterEvent)


def decode_event(prefix: str, subject: str, data: bytes, seq: int | None = None) -> RouterEvent:
    """The event a message on `<prefix>.events.<execution_id>.<event_type>` carries, checked as
    `decode_event_body` checks it, as the model of its type (`RouterEvent`). Raises Malformed:
    `schema` when a body of a known type lacks a field of its type or holds one of another
    shape (bus/dispositions.py: dead-lettered and terminated, never applied).
    """
    return router_event(decode_event_body(prefix, subject, data, seq))


def router_event(body: Mapping[str, object]) -> RouterEvent:
    """An event body as the model of its type (`RouterEvent`), or Malformed naming every field
    that is wrong. For bodies read back from a log (replay, verify) and built in memory (tests).
    """
    try:
        return _ROUTER_EVENTS.validate_python(body)
    except ValidationError as exc:
        # Each error's location starts with the union member it was checked as: left out.
        reason = "; ".join(f"{'.'.join(str(p) for p in e['loc'][1:]) or 'body'}: {e['msg']}"
                           for e in exc.errors())
        raise Malformed("schema", reason, dict(body)) from None

