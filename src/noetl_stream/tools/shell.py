"""`shell`: run one command as a child process; result `{stdout, stderr, exit_code}`.

A string `command` runs through `/bin/sh -c`; a list is executed directly, with no shell between.
`env` is merged over the worker's environment (a null value removes a variable). The child leads
its own process group, so a timeout kills everything it started, not only the shell. A non-zero
exit is an error outcome whose message carries the exit code and the tail of stderr.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from typing import Any

from noetl_stream.dsl.layering import kind_default
from noetl_stream.tools.base import Outcome, TaskCall, ToolServices

DEFAULT_TIMEOUT_S = float(kind_default("shell", "timeout"))  # dsl/layering.py: one table
STDERR_TAIL_CHARS = 500
# After the group is killed, a grandchild that left the group may still hold the pipes open.
PIPE_GRACE_S = 1.0


def _argv(command: Any) -> list[str] | None:
    if isinstance(command, str) and command.strip():
        return ["/bin/sh", "-c", command]
    if isinstance(command, list) and command:
        return [str(part) for part in command]
    return None


def _environment(overrides: Any) -> dict[str, str]:
    env = dict(os.environ)
    for key, value in (overrides or {}).items():
        if value is None:
            env.pop(str(key), None)
        else:
            env[str(key)] = value if isinstance(value, str) else str(value)
    return env


def _tail(text: str) -> str:
    text = text.strip()
    return text if len(text) <= STDERR_TAIL_CHARS else "..." + text[-STDERR_TAIL_CHARS:]


async def _drain(stream: asyncio.StreamReader | None, into: bytearray) -> None:
    if stream is None:
        return
    while chunk := await stream.read(65536):
        into.extend(chunk)


class ShellTool:
    kind = "shell"

    def __init__(self, services: ToolServices | None = None) -> None:
        del services  # a child process needs nothing shared

    async def run(self, call: TaskCall) -> Outcome:
        cfg = call.config
        argv = _argv(cfg.get("command"))
        if argv is None:
            return Outcome.failure("shell task needs a command: a string or a non-empty list",
                                   "config")
        if cfg.get("env") is not None and not isinstance(cfg["env"], dict):
            return Outcome.failure("shell task field env must be a mapping", "config")
        timeout_s = call.timeout(DEFAULT_TIMEOUT_S)
        cwd = cfg.get("cwd")
        try:
            proc = await asyncio.create_subprocess_exec(
                *argv, cwd=str(cwd) if cwd else None, env=_environment(cfg.get("env")),
                stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE, start_new_session=True)
        except OSError as exc:
            return Outcome.failure(f"cannot start {argv[0]!r}: {exc}", "config")
        out, err = bytearray(), bytearray()
        # Done means exited and both pipes at EOF: a background child holding stdout counts as
        # still running, since its output is part of the result.
        done = asyncio.gather(proc.wait(), _drain(proc.stdout, out), _drain(proc.stderr, err))
        timed_out = False
        try:
            await asyncio.wait_for(asyncio.shield(done), timeout_s)
        except TimeoutError:
            timed_out = True
            await _kill_group(proc)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(done), PIPE_GRACE_S)
        except BaseException:
            # Cancelled: the command must not outlive the task that started it.
            await _kill_group(proc)
            done.cancel()
            raise
        finally:
            if not done.done():
                done.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await done
        stdout = out.decode("utf-8", errors="replace")
        stderr = err.decode("utf-8", errors="replace")
        result: dict[str, Any] = {"stdout": stdout, "stderr": stderr, "exit_code": proc.returncode}
        if timed_out:
            outcome = Outcome.failure(
                f"command ran longer than its timeout of {timeout_s:g}s and was killed", "timeout",
                retryable=True, **result)
        elif proc.returncode != 0:
            tail = _tail(stderr)
            outcome = Outcome.failure(
                f"command exited with code {proc.returncode}" + (f": {tail}" if tail else ""),
                "shell", **result)
        else:
            return Outcome.success(result)
        outcome.result = result
        return outcome

    async def close(self) -> None:
        return None


async def _kill_group(proc: asyncio.subprocess.Process) -> None:
    # The child was started in a new session, so its pid is its process group id.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(ProcessLookupError):
        await proc.wait()
