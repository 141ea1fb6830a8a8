"""How ended python children are cleared away and fresh ones handed out (tools/python.py,
tools/python_runner.py): the places of children ended one after another are cleared in one
batch, a new child short of a uid has them cleared at once, an interpreter serves one execution
only while many executions churn through the pool, and a forked child starts with nothing of
the fork server's warm-up and exactly the environment of its place."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Iterator, Set
from pathlib import Path

import pytest

from noetl_stream.testing.waiting import assert_eventually
from noetl_stream.tools import python as python_tool_module
from noetl_stream.tools.base import TaskCall
from noetl_stream.tools.python import PythonTool
from noetl_stream.tools.python_runner_source import PACKAGE
from noetl_stream.tools.python_slots import SandboxUser
from noetl_stream.tools.sandbox import ChildPlace, Sandbox, make_sandbox

pytestmark = pytest.mark.integration

root_only = pytest.mark.skipif(os.geteuid() != 0, reason="slot uids need a root worker")
# Uids no account has, apart from those other tests claim.
TEST_UIDS = range(3_999_980_100, 3_999_980_120)

CRASH = "import os\nos._exit(3)\n"
HOME = "import os\nresult = os.environ['HOME']\n"


class CountingSandbox(Sandbox):
    """A real sandbox that also notes how many places each clearing round closes."""

    rounds: list[int]

    def close_places(self, places: list[ChildPlace], *, killed: Set[SandboxUser]) -> None:
        self.rounds.append(len(places))
        super().close_places(places, killed=killed)


def counting(base: Sandbox) -> CountingSandbox:
    sandbox = CountingSandbox(base.executable, base.env, base.user, base.extra, base.slots)
    sandbox.rounds = []
    return sandbox


def _step(execution_id: str, code: str, step: str = "s") -> TaskCall:
    return TaskCall(execution_id=execution_id, step=step, task="t", kind="python",
                    config={"code": code}, input={}, spec={},
                    idempotency_key=f"{execution_id}.{step}.1:None:t:1")


@pytest.fixture
def uids(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("NOETL_STREAM_PYTHON_UIDS", f"{TEST_UIDS.start}-{TEST_UIDS.stop - 1}")
    yield


@pytest.fixture
async def four_at_once(uids: None) -> AsyncIterator[tuple[PythonTool, CountingSandbox]]:
    """Four steps at once (batches of two ended children), none started ahead, uids of their
    own under a root worker (as many as such a tool claims), else the worker's user.
    """
    sandbox = counting(await asyncio.to_thread(
        make_sandbox, slots=4 * python_tool_module.KEPT_PER_PROCESS + 4))
    tool = PythonTool(max_children=4, warm=0, idle_s=600.0, sandbox=sandbox)
    await tool.start()
    assert await tool.sandbox() is sandbox
    sandbox.rounds.clear()  # the start's probe of the sandbox closed a place of its own
    try:
        yield tool, sandbox
    finally:
        await tool.close()


@pytest.mark.timeout(120)
async def test_children_ended_one_after_another_are_cleared_in_one_round(
        four_at_once: tuple[PythonTool, CountingSandbox],
        monkeypatch: pytest.MonkeyPatch) -> None:
    tool, sandbox = four_at_once
    monkeypatch.setattr(python_tool_module, "CLEAR_WAIT_S", 3600.0)
    homes = []
    for execution in ("a", "b"):  # each one's child ends with its step, one after the other
        home = (await tool.run(_step(execution, HOME))).result
        assert isinstance(home, str)
        homes.append(Path(home))
        died = await tool.run(_step(execution, CRASH, step="s2"))
        assert died.error is not None and died.error["kind"] == "crash"

    async def cleared_together() -> None:
        assert sandbox.rounds == [2]

    await assert_eventually(cleared_together, timeout_s=60)
    if sandbox.slots is not None:  # a folder of its own for each child
        assert not any([await asyncio.to_thread(home.exists) for home in homes])


@pytest.mark.timeout(120)
async def test_a_lone_ended_childs_place_is_cleared_when_its_wait_is_up(
        four_at_once: tuple[PythonTool, CountingSandbox],
        monkeypatch: pytest.MonkeyPatch) -> None:
    tool, sandbox = four_at_once
    monkeypatch.setattr(python_tool_module, "CLEAR_WAIT_S", 0.5)
    died = await tool.run(_step("a", CRASH))
    assert died.error is not None and died.error["kind"] == "crash"

    async def cleared() -> None:
        assert sandbox.rounds == [1]

    await assert_eventually(cleared, timeout_s=60)


@root_only
@pytest.mark.timeout(120)
async def test_a_new_child_short_of_a_uid_has_the_ended_ones_cleared_at_once(
        uids: None, monkeypatch: pytest.MonkeyPatch) -> None:
    # Three uids only: two kept interpreters hold theirs, the third's child ended, and the
    # batch it waits in would not be due for an hour.
    monkeypatch.setattr(python_tool_module, "CLEAR_WAIT_S", 3600.0)
    sandbox = counting(await asyncio.to_thread(make_sandbox, slots=3))
    tool = PythonTool(max_children=4, warm=0, idle_s=600.0, sandbox=sandbox)
    await tool.start()
    sandbox.rounds.clear()  # the start's probe closed a place of its own
    try:
        for execution in ("a", "b"):
            assert (await tool.run(_step(execution, HOME))).ok
        died = await tool.run(_step("c", CRASH))
        assert died.error is not None and died.error["kind"] == "crash"
        assert sandbox.rounds == []

        outcome = await asyncio.wait_for(tool.run(_step("d", HOME)), 60)
    finally:
        await tool.close()
    assert outcome.ok, outcome.error
    assert sandbox.rounds[0] == 1


OWNER = """\
import os, sys
owner = getattr(sys, "noetl_test_owner", None)
if owner is None:
    sys.noetl_test_owner = owner = execution_id
result = {"pid": os.getpid(), "owner": owner}
"""


@pytest.mark.timeout(180)
async def test_an_interpreter_serves_one_execution_while_many_churn_through_the_pool(
        uids: None) -> None:
    # Twelve executions of four steps at once against eight interpreters kept: children are
    # started ahead, kept, ended to make room and started anew all along.
    tool = PythonTool(max_children=2, warm=2, idle_s=600.0)
    await tool.start()

    async def execution(name: str) -> list[dict[str, object]]:
        seen = []
        for n in range(4):
            outcome = await tool.run(_step(name, OWNER, step=f"s{n}"))
            assert outcome.ok, outcome.error
            assert isinstance(outcome.result, dict)
            seen.append(outcome.result)
        return seen

    names = [f"x{n}" for n in range(12)]
    try:
        runs = await asyncio.gather(*(execution(name) for name in names))
    finally:
        await tool.close()
    pids: dict[object, str] = {}
    for name, seen in zip(names, runs, strict=True):
        for step in seen:
            assert step["owner"] == name, f"{name}'s step ran in {step['owner']}'s interpreter"
            assert pids.setdefault(step["pid"], name) == name
    assert len(pids) > len(names) // 2  # interpreters came and went: the check covers churn


async def test_a_forked_child_holds_only_its_own_code_and_its_places_environment(
        uids: None) -> None:
    sandbox = await asyncio.to_thread(make_sandbox,
                                      slots=2 * python_tool_module.KEPT_PER_PROCESS + 2)
    tool = PythonTool(max_children=2, warm=1, idle_s=600.0, sandbox=sandbox)
    await tool.start()
    code = (f"import os, sys\ncompiling = sys.modules['{PACKAGE}.python_runner_code']\n"
            "result = {'compiled': [key[0] for key in compiling._COMPILED],\n"
            "          'env': dict(os.environ), 'uid': os.getuid()}\n")
    try:
        outcome = await tool.run(_step("a", code))
    finally:
        await tool.close()
    assert outcome.ok, outcome.error
    result = outcome.result
    assert isinstance(result, dict)
    assert result["compiled"] == [code]  # nothing of the fork server's warm-up
    expected = dict(sandbox.env)
    if sandbox.slots is not None:  # a slot's own folder and name
        folder, name = result["env"]["HOME"], f"noetl-python-{result['uid']}"
        expected.update({"HOME": folder, "TMPDIR": folder, "USER": name, "LOGNAME": name})
    assert result["env"] == expected
