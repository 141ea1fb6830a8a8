"""The message models: identifiers, bounds, subject/body agreement, the constructors."""

from __future__ import annotations

import json
import pickle
from typing import Any

import pytest
from pydantic import ValidationError

from noetl_stream import ids, jsonutil, messages
from noetl_stream.dsl.task_list import TaskList
from noetl_stream.event_decoding import decode_event_body
from noetl_stream.messages import (
    CancelRequest,
    Command,
    CommandContext,
    CommandCursor,
    ExecutionRequest,
    Malformed,
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


TASKS = [{"name": "t", "kind": "noop"}]


def typed_command(**changes: Any) -> Command:
    fields: dict[str, Any] = {
        "execution_id": "1", "playbook": "p", "step": "start", "step_run_id": "1.start.1",
        "parent_execution_id": None, "iteration": None, "tasks": TaskList(TASKS),
        "step_args": {}, "context": CommandContext(workload={}, steps={}), "keychain": [],
        "max_payload_bytes": 262144, **changes}
    return messages.command_body(**fields)


def command(**overrides: Any) -> dict[str, Any]:
    """A command as a worker receives it (JSON), with fields replaced."""
    return {**jsonutil.loads(jsonutil.dumps(typed_command())), **overrides}


def test_the_command_constructor_builds_a_valid_command() -> None:
    body = command()
    assert Command.model_validate(body).step == "start"
    assert "cursor" not in body
    cursor = CommandCursor(claim="select 1", iterator="row")
    assert typed_command(cursor=cursor).cursor == cursor


def test_a_command_is_published_byte_for_byte_as_the_router_always_built_it() -> None:
    context = {"workload": {"n": 1}, "ctx": {}, "args": {}, "iter": {"item": [1, "é"]},
               "vars": {}, "steps": {"a": {"x": 1.5}}, "steps_http": {}, "steps_loop": ["a"]}
    before = {"execution_id": "1", "playbook": None, "step": "start",
              "step_run_id": "1.start.1", "parent_execution_id": "0", "iteration": 3,
              "attempt": 1, "tasks": TASKS, "step_args": None, "context": context,
              "keychain": [{"name": "k", "kind": "secret"}], "max_payload_bytes": 262144,
              "source_file": "p.yaml", "step_line": 7}
    plain = typed_command(playbook=None, parent_execution_id="0", iteration=3, step_args=None,
                          context=CommandContext(**context), keychain=before["keychain"],
                          source_file="p.yaml", step_line=7)
    assert jsonutil.dumps(plain) == jsonutil.dumps(before)
    cursor = {"kind": "postgres", "claim": "select 1", "auth": None, "connection": None,
              "iterator": "row"}
    full = typed_command(cursor=CommandCursor(**cursor), task_results=True, restart=2)
    assert jsonutil.dumps(full) == jsonutil.dumps(
        {**before, "playbook": "p", "parent_execution_id": None, "iteration": None,
         "step_args": {}, "context": {**CommandContext(workload={}, steps={}).model_dump()},
         "keychain": [], "source_file": None, "step_line": None, "cursor": cursor,
         "task_results": True, "restart": 2})


def test_a_received_command_reads_its_tasks_as_task_models_validated_once_per_list() -> None:
    first = Command.model_validate(command())
    again = Command.model_validate(command())  # equal list, another object
    assert first.tasks.tasks[0].name == "t" and first.tasks.tasks[0].kind == "noop"
    assert again.tasks.tasks is first.tasks.tasks
    assert jsonutil.dumps(again) == jsonutil.dumps(command())  # and it encodes as received


def test_a_command_whose_tasks_are_not_a_list_of_objects_is_refused_naming_the_field() -> None:
    for tasks, reason in (("noop", "tasks: Input should be a valid list"),
                          ([1], "tasks.0: Input should be a valid dictionary")):
        with pytest.raises(Malformed) as caught:
            validated(Command, json.dumps(command(tasks=tasks)).encode())
        assert caught.value.reason == reason


def test_a_task_a_worker_cannot_read_fails_when_read_not_when_received() -> None:
    # The command stays valid, so the worker fails its step with the reason (worker.py).
    received = Command.model_validate(command(tasks=[{"name": "t", "kind": "noop", "x": 1}]))
    with pytest.raises(ValidationError):
        assert received.tasks.tasks is None  # never reached: reading raises


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


@pytest.mark.parametrize("field,value", [("playbook", "tests/bad\x07path"),
                                         ("playbook", "p" * 5000),
                                         ("source_file", "file\nname.yaml")])
def test_the_router_refuses_a_command_whose_user_text_a_worker_would_refuse(
        field: str, value: str) -> None:
    # A playbook's path is the user's text: the router must fail the execution on it, since a
    # worker that refuses the command only dead-letters it and the execution would wait.
    with pytest.raises(ValidationError):
        typed_command(**{field: value})


def test_the_router_s_command_equals_the_one_a_worker_reads() -> None:
    context = messages.command_context(workload={"n": 1}, ctx={}, args={}, iter={}, vars={},
                                       steps={}, steps_http={}, steps_loop=[])
    built = typed_command(context=context, iteration=2,
                          cursor=CommandCursor(claim="select 1", iterator="row"))
    received = Command.model_validate(jsonutil.loads(jsonutil.dumps(built)))
    assert received == built
    assert jsonutil.dumps(received) == jsonutil.dumps(built)
    # The render pool hands cached states, outbox included, to another process.
    assert pickle.loads(pickle.dumps(built)) == built


def test_an_outcome_subject_s_last_token_is_its_pool_and_no_other_tail_has_one() -> None:
    cases = {"step.done.default": ("step.done", "default"),
             "loop.iteration.failed.gpu-1": ("loop.iteration.failed", "gpu-1"),
             "step.done.": ("step.done", ""), "step.done": ("step.done", None),
             "step.done.a.b": ("step.done.a.b", None), "step.started.default":
             ("step.started.default", None), "signal.step.done.x": ("signal.step.done.x", None),
             "done": ("done", None), "": ("", None)}
    assert {tail: messages.split_outcome_pool(tail) for tail in cases} == cases
