"""The remote CLI reads each success answer as the API's model of it (cli/remote.py answer_as)."""

from __future__ import annotations

import pytest

from noetl_stream.api.models import ExecutionAccepted, ExecutionDetail, SignalSent
from noetl_stream.cli.remote import answer_as
from noetl_stream.cli.remote_cmds import detail_lines
from noetl_stream.errors import InfrastructureError


def test_an_answer_of_the_api_shape_is_read_as_its_model() -> None:
    sent = answer_as(SignalSent, {"execution_id": "e1", "signal": "approve", "seq": 42},
                     "POST /api/executions/e1/signals/approve")

    assert sent.seq == 42 and sent.signal == "approve"


def test_an_answer_of_another_shape_names_the_request_and_the_field() -> None:
    with pytest.raises(InfrastructureError) as caught:
        answer_as(ExecutionAccepted, {"id": "e1", "status": "accepted"}, "POST /api/executions")

    assert str(caught.value) == ("the server's answer to POST /api/executions is not what this "
                                 "client reads: execution_id: Field required")


def test_a_body_that_is_not_an_object_is_refused_the_same_way() -> None:
    with pytest.raises(InfrastructureError, match=r"answer to GET /api/catalog is not what this "
                                                  r"client reads: the body: "):
        answer_as(SignalSent, "<html>proxy error</html>", "GET /api/catalog")


def test_status_lines_of_an_execution_detail() -> None:
    detail = ExecutionDetail.model_validate({
        "execution_id": "e1", "status": "failed", "playbook_path": "etl/daily",
        "playbook_name": "daily", "started_at": "2026-11-26T17:08:03.5Z",
        "parent_execution_id": None, "error": {"message": "boom", "step": "load"},
        "steps": {"load": {"status": "failed", "runs": 2}, "odd": ["not", "a", "record"]}})

    assert detail_lines(detail) == [
        "execution e1: failed (etl/daily)",
        "  started 2026-11-26 17:08:03Z",
        "  step load: failed (2 runs)",
        "  error: boom",
    ]
