"""A step's tasks are dumped once per playbook by the router and validated once per distinct
list by the worker, and a command still gets exactly the tasks it carries."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError
from unit_helpers import parse

from noetl_stream.dsl.task_list import TaskList
from noetl_stream.messages import Command
from noetl_stream.router import start
from noetl_stream.testing import RouterHarness


def noop_task(name: str, **input_: Any) -> dict[str, Any]:
    return {"name": name, "kind": "noop", "input": input_}


def command_tasks(raw: list[dict[str, Any]]) -> tuple[Any, ...]:
    """The tasks a worker reads from a list it received."""
    return TaskList(raw).tasks


def test_the_same_list_is_validated_once() -> None:
    first = command_tasks([noop_task("a", x=1)])
    again = command_tasks([noop_task("a", x=1)])  # equal content, another list object
    assert again is first
    assert first[0].name == "a" and first[0].input == {"x": 1}


def test_a_list_that_differs_in_any_value_gets_its_own_tasks() -> None:
    ours = command_tasks([noop_task("a", x=1)])
    other = command_tasks([noop_task("a", x=2)])
    assert other is not ours
    assert other[0].input == {"x": 2} and ours[0].input == {"x": 1}


def test_an_invalid_list_still_raises_every_time() -> None:
    for _ in range(2):
        with pytest.raises(ValidationError):
            command_tasks([{"name": "a", "kind": "noop", "no_such_field": 1}])


def test_the_router_sends_every_iteration_the_steps_tasks_dumped_once() -> None:
    playbook = parse("""
        workflow:
          - step: start
            loop: {in: "{{ [1, 2, 3] }}", iterator: item, spec: {mode: parallel}}
            tool: {kind: noop, input: {v: "{{ item }}"}}
    """)
    state = start(playbook, execution_id="e1", playbook_key="k", workload={}, now=0.0)
    lists = [m.body.tasks for m in state.outbox if isinstance(m.body, Command)]
    assert len(lists) == 3
    assert lists[0] is lists[2]  # one dump, not one per command
    commands = RouterHarness(playbook).pending_for("start")
    assert commands[0]["tasks"][0]["input"] == {"v": "{{ item }}"}  # rendered by the worker
