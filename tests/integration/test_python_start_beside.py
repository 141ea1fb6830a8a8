"""The python tool of a local `run` starts while the run goes on (tools/python_starting.py): the
registry is there before the tool has started, a python call waits for the start, and a start that
fails is the call's failure, not the run's; a service worker still refuses to start.
"""

from __future__ import annotations

import pytest

from noetl_stream.tools.base import TaskCall
from noetl_stream.tools.registry import ToolRegistry
from noetl_stream.tools.sandbox import ENV_PYTHON_USER, SandboxError

pytestmark = pytest.mark.integration


def _call(code: str) -> TaskCall:
    return TaskCall(execution_id="e1", step="s", task="t", kind="python", config={"code": code},
                    input={}, spec={}, idempotency_key="e1.s.1:None:t:1")


async def test_a_call_made_as_the_registry_is_created_waits_for_the_start() -> None:
    registry = await ToolRegistry.create(python_children=1, python_warm=1,
                                         quiet_python_fallback=True, python_in_background=True)
    try:
        outcome = await registry.get("python").run(_call("result = 6 * 7"))
    finally:
        await registry.close()

    assert outcome.ok, outcome.error
    assert outcome.result == 42


async def test_closed_before_any_call_the_start_is_finished_and_closed() -> None:
    registry = await ToolRegistry.create(python_children=1, python_warm=1,
                                         quiet_python_fallback=True, python_in_background=True)

    await registry.close()  # no call: the start still runs to its end and its children close


async def test_a_start_that_fails_fails_the_python_call_not_the_registry(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV_PYTHON_USER, "no-such-user-here")
    registry = await ToolRegistry.create(python_children=1, python_warm=1,
                                         python_in_background=True)
    try:
        outcome = await registry.get("python").run(_call("result = 1"))
        noop = await registry.get("noop").run(_call("result = 1"))
    finally:
        await registry.close()

    assert not outcome.ok
    assert outcome.error is not None
    assert outcome.error["kind"] == "config"
    assert "python steps cannot start" in outcome.error["message"]
    assert ENV_PYTHON_USER in outcome.error["message"]
    assert noop.ok


async def test_a_service_worker_with_a_sandbox_it_cannot_set_up_does_not_start(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV_PYTHON_USER, "no-such-user-here")

    with pytest.raises(SandboxError, match=ENV_PYTHON_USER):
        await ToolRegistry.create(python_children=1, python_warm=1)
