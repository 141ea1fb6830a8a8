"""The file an execution's messages name is its own request's (router/failures.py `file_of`).

The server parses a text once for every request that sends it, so the parsed playbook's `file` is
the first request's; the execution's state keeps the file its request named, its
`execution.started` records it, and a rebuild from the log (`verify`) names the same one."""

from __future__ import annotations

from typing import Any

from noetl_stream import router
from noetl_stream.dsl import parse_playbook
from noetl_stream.router.state import ExecutionState
from noetl_stream.router_events import router_event
from noetl_stream.server.replay import rebuild
from noetl_stream.server.state_diff import content, first_difference
from noetl_stream.subjects import load_topology

TEXT = """apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: files}
workflow:
  - step: start
    tool: {kind: noop}
    set: {ctx.x: "{{ 1 / 0 }}"}
"""
SHARED = parse_playbook(TEXT, "first.yaml").playbook  # parsed for the first request only


def run(execution_id: str, playbook_file: str | None) -> tuple[ExecutionState, list[dict[str, Any]]]:
    """Start and finish an execution on the shared parse; its state and the log it leaves."""
    state = router.start(SHARED, execution_id=execution_id, playbook_key="pb_files",
                         workload={}, now=10.0, playbook_file=playbook_file)
    log = [{**m.plain_body, "event_id": m.msg_id} for m in state.outbox if m.kind == "event"]
    command = next(m for m in state.outbox if m.kind == "command")
    assert command.body.source_file == (playbook_file or "first.yaml")
    done = {"event_type": "step.done", "execution_id": execution_id, "step": "start",
            "step_run_id": command.body.step_run_id, "pool": "default", "status": "ok",
            "result": None, "timestamp": 10.5}
    log.append(done)
    router.apply(SHARED, state, router_event(done), 11.0)
    log += [{**m.plain_body, "event_id": m.msg_id} for m in state.outbox if m.kind == "event"]
    return state, log


def test_a_template_error_names_the_file_of_its_own_request() -> None:
    first, _ = run("ex1", "first.yaml")
    second, _ = run("ex2", "second.yaml")
    assert first.status == second.status == "failed"
    assert str(first.steps["start"].error).count("first.yaml:5:") == 1
    assert "second.yaml:5:" in str(second.steps["start"].error)
    assert "first.yaml" not in str(second.steps["start"].error)
    assert second.playbook_file == "second.yaml"
    assert ExecutionState.from_dict(second.to_dict()).playbook_file == "second.yaml"


def test_a_rebuild_from_the_log_names_the_same_file() -> None:
    state, log = run("ex2", "second.yaml")
    started = next(e for e in log if e["event_type"] == "execution.started")
    assert started["file"] == "second.yaml"
    # verify parses the catalog text under its key, not under any request's file.
    catalog = parse_playbook(TEXT, "pb_files").playbook
    out = rebuild(catalog, log, load_topology(), playbook_key="pb_files")
    assert out is not None
    assert first_difference(content(state), content(out.state)) is None
    assert "second.yaml:5:" in str(out.state.error)


def test_a_state_from_before_names_the_playbook_file_as_it_did() -> None:
    state, _ = run("ex3", None)
    assert state.playbook_file is None
    assert "first.yaml:5:" in str(state.steps["start"].error)
