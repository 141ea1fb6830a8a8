"""Every event type the router applies decodes to its own model (router_events.py), chosen by
`event_type`; a body of a known type without its type's fields is refused as `schema`, which the
server dead-letters and terminates (bus/dispositions.py), and never applies."""

from __future__ import annotations

from typing import Any

import pytest

from noetl_stream import events, jsonutil
from noetl_stream.bus.dispositions import RULES, Disposition, Failure, classify
from noetl_stream.bus.signals import decode_event
from noetl_stream.messages import Malformed, SignalEvent
from noetl_stream.router_events import RouterEvent, router_event
from noetl_stream.subjects import load_topology

TOPOLOGY = load_topology()
RUN = "e1.s.1"
OUTCOME = {"step": "s", "step_run_id": RUN, "status": "ok", "result": {"n": 1}}
# Each type NOETL_ROUTER copies for the router, with a body of its own fields.
BODIES: dict[str, tuple[dict[str, Any], type[events.Event]]] = {
    "execution.cancel.requested": ({"reason": "enough", "requested_by": "cli"},
                                   events.CancelRequested),
    "execution.restart.requested": ({"restart": 1, "from_step": "s"}, events.RestartRequested),
    "execution.replayed": ({"replay_execution_id": "e2"}, events.Replayed),
    "child.started": ({"child_execution_id": "c1", "step_run_id": RUN, "iteration": None,
                       "detached": False}, events.ChildStarted),
    "execution.admitted": ({}, events.ExecutionAdmitted),
    "timer.fired": ({"timer_id": "nudge", "fire_at": 2.0, "set_at": 1.0, "step": "s"},
                    events.TimerFired),
}


def decoded(subject: str, body: object, seq: int | None = None) -> RouterEvent:
    return decode_event(TOPOLOGY, subject, jsonutil.dumps(body), seq)


def router_subjects() -> set[str]:
    """The event types NOETL_ROUTER copies for the router, as its source subjects name them."""
    (stream,) = [s for s in TOPOLOGY.streams if s.source is not None]
    return {subject.split(".", 3)[3].removesuffix(".*").removesuffix(".>")
            for subject in stream.source_subjects}


def test_the_cases_here_are_every_type_the_router_is_fed() -> None:
    outcomes = {"step.done", "step.failed", "loop.iteration.done", "loop.iteration.failed"}
    assert router_subjects() == {*BODIES, *outcomes, "signal"}


@pytest.mark.parametrize("event_type", sorted(BODIES))
def test_each_router_input_type_decodes_to_its_model(event_type: str) -> None:
    body, model = BODIES[event_type]
    event = decoded(TOPOLOGY.event_subject("e1", event_type), body, seq=7)
    assert type(event) is model
    assert (event.event_type, event.execution_id) == (event_type, "e1")


@pytest.mark.parametrize("event_type", ["step.done", "step.failed", "loop.iteration.done",
                                        "loop.iteration.failed"])
def test_an_outcome_decodes_with_the_pool_of_its_subject(event_type: str) -> None:
    iteration = 3 if event_type.startswith("loop.") else None
    event = decoded(TOPOLOGY.outcome_subject("e1", event_type, "gpu"),
                    {**OUTCOME, "iteration": iteration, "route": "fast", "cursor": {"exhausted": True}})
    assert isinstance(event, events.OutcomeEvent)
    assert (event.pool, event.iteration, event.result, event.route) == ("gpu", iteration, {"n": 1},
                                                                        "fast")
    assert event.cursor == {"exhausted": True}


def test_a_signal_decodes_to_its_data_with_the_stream_sequence() -> None:
    event = decoded(TOPOLOGY.signal_subject("e1", "approve"), {"user": "ada"}, seq=12)
    assert isinstance(event, SignalEvent)
    assert (event.event_type, event.data, event.seq) == ("signal.approve", {"user": "ada"}, 12)


def test_a_fired_timer_carries_its_stream_sequence() -> None:
    event = decoded(TOPOLOGY.event_subject("e1", "timer.fired"), BODIES["timer.fired"][0], seq=9)
    assert isinstance(event, events.TimerFired) and event.seq == 9


def test_another_type_decodes_to_the_envelope_alone() -> None:
    event = decoded(TOPOLOGY.event_subject("e1", "step.started"),
                    {"step": "s", "step_run_id": RUN, "run": 1})
    assert type(event) is events.Event
    assert event.model_extra == {"step": "s", "step_run_id": RUN, "run": 1}


def test_an_outcome_whose_error_is_text_keeps_it_as_the_message() -> None:
    event = decoded(TOPOLOGY.outcome_subject("e1", "step.failed", "default"),
                    {**OUTCOME, "status": "error", "error": "boom"})
    assert isinstance(event, events.OutcomeEvent) and event.error == {"message": "boom"}


@pytest.mark.parametrize(("event_type", "body", "named"), [
    ("child.started", {"step_run_id": RUN, "detached": False}, "child_execution_id"),
    ("execution.restart.requested", {"restart": "again"}, "restart"),
    ("execution.replayed", {}, "replay_execution_id"),
    ("timer.fired", {"timer_id": "t", "set_at": 1.0}, "fire_at"),
    ("step.done", {"step": "s", "status": "ok"}, "step_run_id"),
    ("step.done", {**OUTCOME, "iteration": True}, "iteration"),
])
def test_a_known_type_without_its_fields_is_refused_as_schema(event_type: str, body: dict[str, Any],
                                                              named: str) -> None:
    subject = (TOPOLOGY.outcome_subject("e1", event_type, "default") if event_type == "step.done"
               else TOPOLOGY.event_subject("e1", event_type))
    with pytest.raises(Malformed) as caught:
        decoded(subject, body)
    assert caught.value.failure == "schema"
    assert caught.value.reason.startswith(f"{named}:")
    # The documented disposition of a refused event: terminated, dead-lettered, never retried.
    assert classify(caught.value) is Failure.SCHEMA
    assert RULES[Failure.SCHEMA].disposition is Disposition.TERM


def test_a_body_read_back_from_a_log_decodes_like_one_off_the_stream() -> None:
    body = {"event_type": "child.started", "execution_id": "e1", **BODIES["child.started"][0]}
    assert router_event(body) == decoded(TOPOLOGY.event_subject("e1", "child.started"),
                                         BODIES["child.started"][0])


def test_a_delayed_token_timer_fired_late_without_its_setting_still_decodes() -> None:
    # The stall check fires a lost delayed-arc timer itself (server/stalls.py): it never knew
    # when the timer was set.
    late = {"timer_id": "next.1", "fire_at": 5.0, "step": "start", "timestamp": 6.0,
            "late": "its schedule was lost", "data": {"timer_id": "next.1", "to": "later"}}
    event = decoded(TOPOLOGY.event_subject("e1", "timer.fired"), late)
    assert isinstance(event, events.TimerFired)
    assert (event.timer_id, event.set_at) == ("next.1", None)
