"""The shell tool running real child processes."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from noetl_stream.testing.waiting import assert_eventually
from noetl_stream.tools.base import TaskCall
from noetl_stream.tools.shell import ShellTool

pytestmark = pytest.mark.integration


@pytest.fixture
async def shell() -> AsyncIterator[ShellTool]:
    tool = ShellTool()
    try:
        yield tool
    finally:
        await tool.close()


def call(**config: Any) -> TaskCall:
    return TaskCall(execution_id="e1", step="s", task="t", kind="shell", config=config, input={},
                    spec={}, idempotency_key="e1.s.1:None:t:1")


def alive(pid: int) -> bool:
    """Running, as opposed to gone or a zombie waiting for its new parent to reap it."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


async def test_shell_string_runs_through_sh_with_stdout_stderr_and_exit_code(shell: ShellTool) -> None:
    outcome = await shell.run(call(command="echo out; echo err >&2; echo $((1 + 2))"))

    assert outcome.ok
    assert outcome.result == {"stdout": "out\n3\n", "stderr": "err\n", "exit_code": 0}


async def test_shell_list_is_executed_without_a_shell(shell: ShellTool) -> None:
    outcome = await shell.run(call(command=["printf", "%s|", "a b", "$HOME", "*"]))

    assert outcome.ok
    assert outcome.result["stdout"] == "a b|$HOME|*|"


async def test_shell_exit_3_is_an_error_with_the_code_and_stderr_tail(shell: ShellTool) -> None:
    outcome = await shell.run(call(command="echo partial; echo 'disk is full' >&2; exit 3"))

    assert not outcome.ok
    assert outcome.error is not None
    assert outcome.error["kind"] == "shell"
    assert outcome.error["exit_code"] == 3
    assert "exited with code 3" in outcome.error["message"]
    assert "disk is full" in outcome.error["message"]
    assert outcome.result == {"stdout": "partial\n", "stderr": "disk is full\n", "exit_code": 3}


async def test_shell_error_message_keeps_only_the_tail_of_a_long_stderr(shell: ShellTool) -> None:
    outcome = await shell.run(call(command="i=0; while [ $i -lt 300 ]; do echo line$i >&2; "
                                           "i=$((i+1)); done; exit 1"))

    assert outcome.error is not None
    message = outcome.error["message"]
    assert "line299" in message and "line0\n" not in message
    assert len(message) < 700


async def test_shell_timeout_kills_the_whole_process_group(shell: ShellTool, tmp_path: Path) -> None:
    pid_file = tmp_path / "child.pid"
    # The grandchild `sleep` would outlive a kill of the shell alone.
    outcome = await shell.run(call(command=f"sleep 30 & echo $! > {pid_file}; wait", timeout=0.5))

    assert not outcome.ok
    assert outcome.error is not None
    assert outcome.error["kind"] == "timeout"
    assert "0.5s" in outcome.error["message"]
    grandchild = int(pid_file.read_text())

    def grandchild_gone() -> None:
        assert not alive(grandchild)

    await assert_eventually(grandchild_gone, timeout_s=5)


async def test_shell_runs_in_cwd(shell: ShellTool, tmp_path: Path) -> None:
    (tmp_path / "marker.txt").write_text("here")

    outcome = await shell.run(call(command="pwd; cat marker.txt", cwd=str(tmp_path)))

    assert outcome.ok
    assert outcome.result["stdout"] == f"{tmp_path.resolve()}\nhere"


async def test_shell_env_is_merged_over_the_worker_environment(
        shell: ShellTool, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FROM_WORKER", "worker")
    monkeypatch.setenv("DROPPED", "x")

    outcome = await shell.run(call(command='echo "$FROM_WORKER $FROM_TASK $NUMBER ${DROPPED:-gone}"',
                                   env={"FROM_TASK": "task", "NUMBER": 7, "DROPPED": None}))

    assert outcome.ok
    assert outcome.result["stdout"] == "worker task 7 gone\n"


async def test_shell_env_values_that_are_mappings_or_lists_are_their_json_text(
        shell: ShellTool) -> None:
    # `"{{ x | tojson }}"` reads back as the mapping, as in NoETL; a variable takes its JSON.
    outcome = await shell.run(call(command='echo "$DOC|$ROWS"',
                                   env={"DOC": {"a": [1, "x"]}, "ROWS": [1, 2]}))

    assert outcome.ok
    assert outcome.result["stdout"] == '{"a":[1,"x"]}|[1,2]\n'


async def test_shell_missing_program_or_cwd_is_a_config_error(shell: ShellTool, tmp_path: Path) -> None:
    missing_program = await shell.run(call(command=["no-such-program-here"]))
    missing_cwd = await shell.run(call(command="true", cwd=str(tmp_path / "nope")))
    no_command = await shell.run(call(command=""))

    for outcome in (missing_program, missing_cwd, no_command):
        assert outcome.error is not None and outcome.error["kind"] == "config"


async def test_cmds_run_in_order_with_noetl_result_shape(shell: ShellTool, tmp_path: Path) -> None:
    outcome = await shell.run(call(cmds=["echo one", "echo two; echo warn >&2", "pwd"],
                                   cwd=str(tmp_path)))

    assert outcome.ok, outcome.error
    result = outcome.result
    assert result["stdout"] == f"one\n\ntwo\n\n{tmp_path.resolve()}\n"
    assert result["stderr"] == "warn\n"
    assert result["returncode"] == 0 and result["exit_code"] == 0
    assert [c["cmd_preview"] for c in result["commands"]] == ["echo one", "echo two; echo warn >&2",
                                                              "pwd"]
    assert [c["returncode"] for c in result["commands"]] == [0, 0, 0]
    assert result["commands"][1] == {"cmd_preview": "echo two; echo warn >&2", "returncode": 0,
                                     "stdout": "two\n", "stderr": "warn\n",
                                     "duration_ms": result["commands"][1]["duration_ms"]}
    assert all(isinstance(c["duration_ms"], int) for c in result["commands"])


async def test_cmds_stop_at_the_first_program_that_fails(shell: ShellTool, tmp_path: Path) -> None:
    marker = tmp_path / "third-ran"
    outcome = await shell.run(call(cmds=[
        "echo first", "echo 'no space left' >&2\nexit 4", f"touch {marker}"]))

    assert not outcome.ok
    assert outcome.error is not None and outcome.error["kind"] == "shell"
    assert outcome.error["message"].startswith(
        """command 2 of 3 ("echo 'no space left' >&2") exited with code 4""")
    assert "no space left" in outcome.error["message"]
    assert outcome.result["returncode"] == 4
    assert [c["returncode"] for c in outcome.result["commands"]] == [0, 4]
    assert not marker.exists()


async def test_cmds_timeout_bounds_each_program(shell: ShellTool, tmp_path: Path) -> None:
    outcome = await shell.run(call(cmds=["sleep 0.6", "sleep 0.6", "sleep 30"], timeout=1.5))

    assert not outcome.ok
    assert outcome.error is not None and outcome.error["kind"] == "timeout"
    assert outcome.error["message"].startswith("command 3 of 3 ('sleep 30') ran longer than")
    assert [c["returncode"] for c in outcome.result["commands"]] == [0, 0, -1]


async def test_cmd_string_and_the_shell_field(shell: ShellTool) -> None:
    one = await shell.run(call(cmd="echo $0"))
    bash = await shell.run(call(cmds=["echo ${BASH_VERSION:+bash}"], shell="bash"))
    empty = await shell.run(call(cmds=[]))

    assert one.ok and one.result["stdout"] == "/bin/sh\n"
    assert bash.ok and bash.result["stdout"] == "bash\n"
    assert empty.error is not None and empty.error["kind"] == "config"
