"""The python tool against real child interpreters, and one failing step through the whole stack."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from plain_client import PlainClient

from noetl_stream.testing.waiting import assert_eventually
from noetl_stream.tools.base import Outcome, TaskCall
from noetl_stream.tools.python import PythonTool
from playbook_files import read_playbook

pytestmark = pytest.mark.integration


@pytest.fixture
async def python_tool() -> AsyncIterator[PythonTool]:
    tool = PythonTool(max_children=2, warm=1)
    await tool.start()
    try:
        yield tool
    finally:
        await tool.close()


def call(code: str, timeout_s: float | None = None, **inputs: Any) -> TaskCall:
    config: dict[str, Any] = {"code": code}
    if timeout_s is not None:
        config["timeout"] = timeout_s
    return TaskCall(execution_id="e1", step="s", task="t", kind="python", config=config,
                    input=inputs, spec={}, idempotency_key="e1.s.1:None:t:1")


async def test_result_is_the_value_assigned_to_result(python_tool: PythonTool) -> None:
    outcome = await python_tool.run(call("result = {'sum': a + b}", a=2, b=3))

    assert outcome.ok
    assert outcome.result == {"sum": 5}


async def test_main_is_called_with_the_inputs_it_names(python_tool: PythonTool) -> None:
    code = "def main(a, b):\n    return [a, b, input_data['c']]\n"
    outcome = await python_tool.run(call(code, a=1, b="two", c=None))

    assert outcome.result == [1, "two", None]


async def test_an_async_main_is_awaited(python_tool: PythonTool) -> None:
    code = "async def main(n):\n    return n * 2\n"

    assert (await python_tool.run(call(code, n=21))).result == 42


async def test_top_level_return_gives_the_result(python_tool: PythonTool) -> None:
    code = "if n > 1:\n    return {'big': n}\nreturn {'small': n}\n"

    assert (await python_tool.run(call(code, n=5))).result == {"big": 5}
    assert (await python_tool.run(call(code, n=0))).result == {"small": 0}


async def test_exception_is_an_error_outcome_with_its_message(python_tool: PythonTool) -> None:
    outcome = await python_tool.run(call("result = 1 / zero", zero=0))

    assert not outcome.ok
    assert outcome.error is not None
    assert outcome.error["message"] == "ZeroDivisionError: division by zero"
    assert outcome.error["exception_type"] == "ZeroDivisionError"
    assert '"<playbook code>", line 1' in outcome.error["traceback"]


async def test_a_traceback_starts_at_the_steps_own_code(python_tool: PythonTool) -> None:
    code = "def main(rows):\n    return parse(rows)\n\ndef parse(rows):\n    return rows[3]\n"
    outcome = await python_tool.run(call(code, rows=[1]))

    assert outcome.error is not None
    trace = outcome.error["traceback"]
    # The runner's own frames (`_serve`, `run_code`) are not the author's to read.
    assert trace.splitlines()[:2] == ["Traceback (most recent call last):",
                                      '  File "<playbook code>", line 2, in main'], trace
    assert 'File "<playbook code>", line 5, in parse' in trace
    assert trace.rstrip().endswith("IndexError: list index out of range")
    assert "serve" not in trace and "run_code" not in trace and "runner" not in trace


async def test_a_traceback_keeps_the_frames_of_a_string_the_step_execs(
        python_tool: PythonTool) -> None:
    code = ("def main():\n"
            "    exec(compile('def inner():\\n    raise ValueError(\"bad row\")\\n', '<string>',"
            " 'exec'), globals())\n"
            "    exec('inner()')\n")
    outcome = await python_tool.run(call(code))

    assert outcome.error is not None
    trace = outcome.error["traceback"]
    # The step's own frame, then the two frames of the strings it exec()s: nothing else.
    assert trace.splitlines()[:-1] == [
        "Traceback (most recent call last):",
        '  File "<playbook code>", line 3, in main',
        '  File "<string>", line 1, in <module>',
        '  File "<string>", line 2, in inner'], trace
    assert trace.rstrip().endswith("ValueError: bad row")


async def test_timeout_kills_the_child_and_the_tool_keeps_working(
        python_tool: PythonTool, shared_folder: Path) -> None:
    pid_file = shared_folder / "pid"
    code = ("import os, time\n"
            f"open({str(pid_file)!r}, 'w').write(str(os.getpid()))\n"
            "time.sleep(60)\n")

    outcome = await python_tool.run(call(code, timeout_s=0.5))

    assert not outcome.ok
    assert outcome.error == {"message": "python code ran longer than its timeout of 0.5s",
                             "kind": "timeout", "retryable": True}
    pid = int(pid_file.read_text())

    def child_is_gone() -> None:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)

    await assert_eventually(child_is_gone)
    assert (await python_tool.run(call("result = 'alive'"))).result == "alive"


async def test_print_output_does_not_break_the_protocol(python_tool: PythonTool) -> None:
    code = ("import sys, os\n"
            "print('hello from the step')\n"
            "sys.stdout.write('\\x00\\x00\\x00\\x10garbage')\n"
            "os.write(1, b'\\x00\\x00\\x00\\x05 raw fd one')\n"
            "result = {'after': 'printing'}\n")

    outcome = await python_tool.run(call(code))

    assert outcome == Outcome("ok", result={"after": "printing"}, meta=outcome.meta)
    assert "hello from the step" in outcome.meta["stdout"]
    assert (await python_tool.run(call("result = 2"))).result == 2


@pytest.mark.usefixtures("services")
async def test_failing_python_step_fails_the_execution_with_the_message(client: PlainClient) -> None:
    playbook = read_playbook("integration", "python_tool_fails.yaml")
    feed = await client.run("pyfail1", playbook)

    (failed,) = feed.of("step.failed")
    assert failed["step"] == "start"
    assert "ValueError: bad row 7" in failed["error"]["message"]
    final = feed.final
    assert final["event_type"] == "execution.failed"
    assert final["error"]["step"] == "start"
    assert "bad row 7" in final["error"]["message"]
    assert final["steps"]["start"]["status"] == "failed"


async def test_children_are_forked_fresh_and_started_anew_once_the_fork_server_is_gone(
        python_tool: PythonTool) -> None:
    code = "import os\nresult = {'parent': os.getppid(), 'seen': globals().get('planted')}\n"
    plant = "global planted\nplanted = 'x'\nresult = None\n"
    forks = python_tool._forks
    if forks is None or forks._proc is None:
        pytest.skip("children of a root worker that stay root are never forked")
    server_pid = forks._proc.pid
    assert (await python_tool.run(call(plant))).ok
    first = await python_tool.run(_of("e2", code))
    assert first.result == {"parent": server_pid, "seen": None}
    forks._proc.kill()
    await forks._proc.wait()
    await asyncio.sleep(0.5)  # its children die with it (their death signal): let that land
    for n in range(4):  # children are started as interpreters again: each step still runs
        later = await python_tool.run(_of(f"e{3 + n}", code))
        assert later.ok, later.error
        assert later.result["seen"] is None


def _of(execution_id: str, code: str) -> TaskCall:
    return TaskCall(execution_id=execution_id, step="s", task="t", kind="python",
                    config={"code": code}, input={}, spec={},
                    idempotency_key=f"{execution_id}.s.1:None:t:1")
