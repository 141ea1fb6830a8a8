"""The message models: identifiers, bounds, subject/body agreement, the constructors."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import ValidationError

from noetl_stream import ids, messages
from noetl_stream.messages import (
    CancelRequest,
    Command,
    ExecutionRequest,
    Malformed,
    decode_event_body,
    reply_address,
    validated,
)

LONG = "a" * 4200  # past nats-server's 4096-byte control line on its own


def nested(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = [value]
    return value


@pytest.mark.parametrize("execution_id", ["1", "exec-1_x", "A" * 128,
                                          str((1 << 63) - 1)])
def test_valid_execution_ids(execution_id: str) -> None:
    assert messages.execution_id_problem(execution_id) is None
    assert ExecutionRequest(execution_id=execution_id, playbook="x").execution_id == execution_id


@pytest.mark.parametrize("execution_id", ["", "has space", "c:1", "a.b", "a*", "a>", "a\nb",
                                          "é", "A" * 129, LONG])
def test_invalid_execution_ids_are_refused_everywhere(execution_id: str) -> None:
    assert messages.execution_id_problem(execution_id) is not None
    assert not ids.is_subject_token(execution_id)
    for build in (lambda: ExecutionRequest(execution_id=execution_id, playbook="x"),
                  lambda: CancelRequest(execution_id=execution_id),
                  lambda: ExecutionRequest(parent_execution_id=execution_id, playbook="x")):
        with pytest.raises(ValidationError):
            build()


def test_an_oversized_id_is_named_with_its_length_not_echoed() -> None:
    with pytest.raises(Malformed) as caught:
        validated(ExecutionRequest, json.dumps({"execution_id": LONG, "playbook": "x"}).encode())
    assert caught.value.failure == "schema"
    assert "at most 128 characters (this one 4200)" in str(caught.value)
    assert LONG not in str(caught.value)


@pytest.mark.parametrize(("name", "ok"), [("approve", True), ("payment.settled", True),
                                          ("a" * 128, True), ("a" * 129, False), (LONG, False),
                                          ("", False), ("a..b", False), ("a b", False),
                                          ("a:b", False), ("*", False)])
def test_signal_names(name: str, ok: bool) -> None:
    assert (messages.signal_name_problem(name) is None) is ok


@pytest.mark.parametrize("reply_to", ["_INBOX.abc.1", "replies.x-y"])
def test_reply_to_is_a_subject(reply_to: str) -> None:
    assert CancelRequest(execution_id="1", reply_to=reply_to).reply_to == reply_to


@pytest.mark.parametrize("reply_to", ["a b", "a.*", "a.>", "a..b", "x" * 257])
def test_reply_to_that_is_no_usable_subject_is_refused(reply_to: str) -> None:
    with pytest.raises(ValidationError):
        CancelRequest(execution_id="1", reply_to=reply_to)


def test_reply_address_keeps_only_what_is_valid() -> None:
    assert reply_address({"execution_id": "7", "reply_to": "_INBOX.x"}) == ("7", "_INBOX.x")
    assert reply_address({"execution_id": LONG, "reply_to": "_INBOX." + LONG}) == (None, None)
    assert reply_address({"execution_id": "c:1", "reply_to": 5}) == (None, None)
    assert reply_address([1, 2]) == (None, None)


def test_integers_are_64_bit_and_never_booleans() -> None:
    body = {"execution_id": "1", "playbook": "x", "parent_iteration": 1 << 63}
    with pytest.raises(ValidationError):
        ExecutionRequest.model_validate(body)
    with pytest.raises(ValidationError):
        ExecutionRequest.model_validate({**body, "parent_iteration": True})
    assert ExecutionRequest.model_validate({**body, "parent_iteration": (1 << 63) - 1})


def test_payload_nesting_is_bounded() -> None:
    assert ExecutionRequest(playbook="x", payload={"v": nested(messages.MESSAGE_DEPTH - 2)})
    with pytest.raises(ValidationError, match="nested more than"):
        ExecutionRequest(playbook="x", payload={"v": nested(messages.MESSAGE_DEPTH + 5)})


def test_a_body_that_is_not_an_object_is_malformed_json() -> None:
    for data in (b"\x00\xff", b"[1]", b'"text"', b""):
        with pytest.raises(Malformed) as caught:
            validated(CancelRequest, data)
        assert caught.value.failure == "malformed_json"


def command(**overrides: Any) -> dict[str, Any]:
    return {**messages.command_body(
        execution_id="1", playbook="p", step="start", step_run_id="1.start.1",
        parent_execution_id=None, iteration=None, tasks=[{"name": "t", "kind": "noop"}],
        step_args={}, context={"workload": {}, "steps": {}}, keychain=[],
        max_payload_bytes=262144), **overrides}


def test_the_command_constructor_builds_a_valid_command() -> None:
    body = command()
    assert Command.model_validate(body).step == "start"
    assert "cursor" not in body
    cursor = messages.command_body(**{**body, "cursor": {"kind": "postgres"}})
    assert cursor["cursor"] == {"kind": "postgres"}


@pytest.mark.parametrize("context", [[1, 2], "ctx", 7, None])
def test_a_command_whose_context_is_not_a_mapping_is_refused(context: Any) -> None:
    with pytest.raises(Malformed) as caught:
        validated(Command, json.dumps(command(context=context)).encode())
    assert caught.value.failure == "schema" and "context" in caught.value.reason


@pytest.mark.parametrize("change", [{"execution_id": "c:1"}, {"step": "a\nb"},
                                    {"step": "s" * 257}, {"iteration": "1"},
                                    {"iteration": 1 << 64}, {"tasks": "noop"}])
def test_a_command_with_a_bad_field_is_refused(change: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        Command.model_validate(command(**change))


def test_the_event_constructor_puts_the_envelope_first() -> None:
    body = messages.event_body("step.done", "1", 5.0, step="a", status="ok")
    assert list(body)[:4] == ["event_type", "execution_id", "timestamp", "parent_execution_id"]
    assert body["step"] == "a"


# -- events read off the stream -------------------------------------------------------------
def event(subject: str, body: Any, seq: int | None = None) -> dict[str, Any]:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    return decode_event_body("noetl", subject, data, seq)


def test_an_event_takes_its_identity_from_its_subject() -> None:
    got = event("noetl.events.7.step.done", {"step": "a", "step_run_id": "7.a.1"})
    assert (got["execution_id"], got["event_type"]) == ("7", "step.done")


@pytest.mark.parametrize(("subject", "body", "field"), [
    ("noetl.events.7.step.done", {"event_type": "execution.cancel.requested"}, "event_type"),
    ("noetl.events.7.step.done", {"execution_id": "8"}, "execution_id"),
    ("noetl.events.7.step.done", {"execution_id": "has space"}, "execution_id"),
    ("noetl.events.7.timer.fired", {"event_type": "step.done"}, "event_type"),
])
def test_a_body_cannot_move_itself_to_another_execution_or_type(subject: str, body: Any,
                                                                field: str) -> None:
    with pytest.raises(Malformed) as caught:
        event(subject, body)
    assert caught.value.failure == "subject_mismatch" and field in str(caught.value)


@pytest.mark.parametrize("subject", ["noetl.events.c:1.step.done", "noetl.events.c:1.signal.go",
                                     f"noetl.events.{'a' * 129}.signal.go",
                                     f"noetl.events.7.signal.{'a' * 129}"])
def test_an_event_with_an_invalid_identifier_in_its_subject_is_refused(subject: str) -> None:
    with pytest.raises(Malformed) as caught:
        event(subject, {})
    assert caught.value.failure == "schema"


@pytest.mark.parametrize("body", [{"step": 5}, {"iteration": "x"}, {"iteration": True},
                                  {"parent_execution_id": "a b"},
                                  {"result": nested(messages.MESSAGE_DEPTH + 5)}])
def test_an_event_with_a_bad_envelope_field_is_refused(body: dict[str, Any]) -> None:
    with pytest.raises(Malformed) as caught:
        event("noetl.events.7.step.done", body)
    assert caught.value.failure == "schema"


def test_a_signal_body_is_data_never_an_envelope() -> None:
    got = event("noetl.events.7.signal.go", {"event_type": "execution.completed",
                                            "execution_id": "8"}, seq=3)
    assert (got["event_type"], got["execution_id"], got["seq"]) == ("signal.go", "7", 3)
    assert got["data"]["execution_id"] == "8"
    assert event("noetl.events.7.signal.go", b"not json")["data"] == "not json"
    assert event("noetl.events.7.signal.go", b"")["data"] is None
    with pytest.raises(Malformed):
        event("noetl.events.7.signal.go", {"v": nested(messages.MESSAGE_DEPTH + 5)})


def test_a_timer_schedule_reads_as_scheduled() -> None:
    got = event("noetl.events.7.timer.schedule.nudge", {"event_type": "timer.fired",
                                                        "timer_id": "nudge"})
    assert got["event_type"] == "timer.scheduled"
