"""The quick envelope check of a decoded event takes exactly what EventEnvelope takes, and an
event it does not take is refused with the model's own reason."""

from __future__ import annotations

import itertools

import pytest
from pydantic import JsonValue, ValidationError

from noetl_stream import jsonutil
from noetl_stream.event_decoding import _plainly_valid, decode_event_body
from noetl_stream.messages import (
    INT64_MAX,
    MAX_STEP_NAME_LENGTH,
    EventEnvelope,
    Malformed,
    describe,
)

STEPS: list[JsonValue] = [None, "s3", "", "a\x00b", "a\x85b", "a\u2028b", "é b", 7, True,
                          "x" * MAX_STEP_NAME_LENGTH, "x" * (MAX_STEP_NAME_LENGTH + 1)]
RUNS: list[JsonValue] = [None, "1.s3.1", "", "1.s3\n.1", 1.5, "r" * 700]
ITERATIONS: list[JsonValue] = [None, 0, 3, -1, True, 1.0, "2", INT64_MAX, INT64_MAX + 1]
PARENTS: list[JsonValue] = [None, "518472094613323776", "a.b", "", 5, "p" * 129]
TYPES = ["step.done", "step.started", "command.issued", "custom.thing", "Bad.type"]


def model_reason(body: dict[str, JsonValue]) -> str | None:
    try:
        EventEnvelope.model_validate(body)
    except ValidationError as exc:
        return describe(exc)
    return None


def test_the_quick_check_passes_only_envelopes_the_model_takes() -> None:
    passed = 0
    for step, run, iteration, parent in itertools.product(STEPS, RUNS, ITERATIONS, PARENTS):
        for event_type in TYPES:
            body: dict[str, JsonValue] = {
                "execution_id": "1", "event_type": event_type, "step": step,
                "step_run_id": run, "iteration": iteration, "parent_execution_id": parent}
            if _plainly_valid(body):
                passed += 1
                assert model_reason(body) is None, body
    # The plain forms take the quick way: 4 steps, 2 runs, 5 iterations, 2 parents, 2 types.
    assert passed == 4 * 2 * 5 * 2 * 2


@pytest.mark.parametrize("fields", [
    {"step": "a\x00b"}, {"step": ""}, {"step": 7}, {"step_run_id": "r" * 700},
    {"iteration": True}, {"iteration": INT64_MAX + 1}, {"iteration": "2"},
    {"parent_execution_id": "a.b"}, {"step": "é b", "iteration": 1.0}])
def test_an_envelope_the_model_refuses_is_malformed_with_the_model_s_reason(
        fields: dict[str, JsonValue]) -> None:
    body: dict[str, JsonValue] = {"execution_id": "1", "event_type": "step.done",
                                  "status": "ok", "step": "s", "step_run_id": "1.s.1", **fields}
    with pytest.raises(Malformed) as caught:
        decode_event_body("noetl", "noetl.events.1.step.done.default", jsonutil.dumps(body))
    assert caught.value.failure == "schema"
    assert caught.value.reason == model_reason({**body, "pool": "default"})


def test_an_uncatalogued_but_valid_type_is_still_taken() -> None:
    body = {"execution_id": "1", "event_type": "custom.thing", "step": "é b"}
    assert decode_event_body("noetl", "noetl.events.1.custom.thing",
                             jsonutil.dumps(body))["step"] == "é b"
