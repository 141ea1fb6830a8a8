"""`shell`: run a command, or NoETL's `cmds:` list of programs, as child processes.

`command:` is one command: a string runs through `/bin/sh -c`, a list is executed directly, with no
shell between; the result is `{stdout, stderr, exit_code}`. `cmds:` (or `cmd:`, one program) is
NoETL's form: each entry is a shell program run in order through `<shell> -c` (`shell:`, default
`/bin/sh`), stopping at the first that exits non-zero; the result mirrors NoETL's shell executor,
`{stdout, stderr, returncode, exit_code, commands: [{cmd_preview, returncode, stdout, stderr,
duration_ms}], duration_ms}`, the outputs joined by newlines as NoETL joins them. The timeout
bounds each program, as NoETL's does.

`env` is merged over the worker's environment (a null value removes a variable). The child leads
its own process group, so a timeout kills everything it started, not only the shell. A non-zero
exit is an error outcome whose message carries the exit code and the tail of stderr.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import NotRequired, TypedDict

from noetl_stream import jsonutil
from noetl_stream.dsl.layering import kind_default
from noetl_stream.jsonutil import JsonValue
from noetl_stream.tools.base import Outcome, TaskCall, ToolServices

DEFAULT_TIMEOUT_S = float(kind_default("shell", "timeout"))  # dsl/layering.py: one table
DEFAULT_SHELL = "/bin/sh"
STDERR_TAIL_CHARS = 500
PREVIEW_CHARS = 120  # NoETL's `cmd_preview`: the first line of a program, this long at most
# After the group is killed, a grandchild that left the group may still hold the pipes open.
PIPE_GRACE_S = 1.0


def _argv(command: JsonValue, shell: str) -> list[str] | None:
    if isinstance(command, str) and command.strip():
        return [shell, "-c", command]
    if isinstance(command, list) and command:
        return [str(part) for part in command]
    return None


def _programs(cfg: Mapping[str, JsonValue]) -> list[str] | None:
    """NoETL's `cmds:` (a list of programs, or one string) or `cmd:`; None when neither is given."""
    raw = cfg.get("cmds")
    if raw is None:
        raw = cfg.get("cmd")
    if raw is None:
        return None
    if isinstance(raw, list):
        return [str(entry) for entry in raw]
    return [str(raw)] if str(raw).strip() else []


def _env_text(value: JsonValue) -> str:
    # A mapping or list (`"{{ x | tojson }}"` reads back as one) is written as its JSON text.
    if isinstance(value, (dict, list)):
        return jsonutil.dumps_str(value)
    return value if isinstance(value, str) else str(value)


def _environment(overrides: JsonValue) -> dict[str, str]:
    env = dict(os.environ)
    # ShellTool.run refuses an `env` that is not a mapping before anything starts.
    for key, value in (overrides.items() if isinstance(overrides, dict) else ()):
        if value is None:
            env.pop(str(key), None)
        else:
            env[str(key)] = _env_text(value)
    return env


class _CommandRun(TypedDict):
    """One program of `cmds:` as the result lists it (NoETL's names)."""

    cmd_preview: str
    returncode: int | None
    stdout: str
    stderr: str
    duration_ms: int


class _ShellResult(TypedDict):
    """A shell task's result; `cmds:` adds NoETL's names for each program's run."""

    stdout: str
    stderr: str
    exit_code: int | None
    returncode: NotRequired[int | None]
    commands: NotRequired[list[_CommandRun]]
    duration_ms: NotRequired[int]


def _tail(text: str) -> str:
    text = text.strip()
    return text if len(text) <= STDERR_TAIL_CHARS else "..." + text[-STDERR_TAIL_CHARS:]


def _preview(program: str) -> str:
    return program.strip().splitlines()[0][:PREVIEW_CHARS] if program.strip() else ""


async def _drain(stream: asyncio.StreamReader | None, into: bytearray) -> None:
    if stream is None:
        return
    while chunk := await stream.read(65536):
        into.extend(chunk)


@dataclass(frozen=True)
class _Ran:
    stdout: str
    stderr: str
    returncode: int | None
    timed_out: bool
    duration_ms: int


class _StartError(Exception):
    """The program could not be started (missing program or working directory)."""


class ShellTool:
    kind = "shell"

    def __init__(self, services: ToolServices | None = None) -> None:
        del services  # a child process needs nothing shared

    async def run(self, call: TaskCall) -> Outcome:
        cfg = call.config
        if cfg.get("env") is not None and not isinstance(cfg["env"], dict):
            return Outcome.failure("shell task field env must be a mapping", "config")
        shell = str(cfg.get("shell") or DEFAULT_SHELL)
        programs = _programs(cfg)
        if programs is not None:
            if not programs:
                return Outcome.failure("shell task field cmds needs at least one program",
                                       "config")
            return await self._run_programs(call, programs, shell)
        argv = _argv(cfg.get("command"), shell)
        if argv is None:
            return Outcome.failure("shell task needs a command (a string or a non-empty list) "
                                   "or cmds (a list of programs)", "config")
        timeout_s = call.timeout(DEFAULT_TIMEOUT_S)
        try:
            ran = await _run(argv, cfg, timeout_s)
        except _StartError as exc:
            return Outcome.failure(str(exc), "config")
        result: _ShellResult = {"stdout": ran.stdout, "stderr": ran.stderr,
                                  "exit_code": ran.returncode}
        if ran.timed_out:
            return _timed_out(timeout_s, result)
        if ran.returncode != 0:
            return _exited("command", ran, result)
        return Outcome.success(result)

    async def _run_programs(self, call: TaskCall, programs: list[str], shell: str) -> Outcome:
        timeout_s = call.timeout(DEFAULT_TIMEOUT_S)
        started = time.monotonic()
        each: list[_CommandRun] = []
        ran: _Ran | None = None
        for program in programs:
            try:
                ran = await _run([shell, "-c", program], call.config, timeout_s)
            except _StartError as exc:
                return Outcome.failure(str(exc), "config")
            each.append({"cmd_preview": _preview(program),
                         "returncode": -1 if ran.timed_out else ran.returncode,
                         "stdout": ran.stdout, "stderr": ran.stderr,
                         "duration_ms": ran.duration_ms})
            if ran.timed_out or ran.returncode != 0:
                break
        assert ran is not None  # programs is not empty
        returncode = each[-1]["returncode"]
        result: _ShellResult = {"stdout": "\n".join(c["stdout"] for c in each if c["stdout"]),
                  "stderr": "\n".join(c["stderr"] for c in each if c["stderr"]),
                  "returncode": returncode, "exit_code": returncode, "commands": each,
                  "duration_ms": int((time.monotonic() - started) * 1000)}
        where = f"command {len(each)} of {len(programs)} ({each[-1]['cmd_preview']!r})"
        if ran.timed_out:
            return _timed_out(timeout_s, result, where)
        if ran.returncode != 0:
            return _exited(where, ran, result)
        return Outcome.success(result)

    async def close(self) -> None:
        return None


def _timed_out(timeout_s: float, result: _ShellResult, what: str = "command") -> Outcome:
    outcome = Outcome.failure(f"{what} ran longer than its timeout of {timeout_s:g}s and was "
                              "killed", "timeout", retryable=True, **result)
    outcome.result = result
    return outcome


def _exited(what: str, ran: _Ran, result: _ShellResult) -> Outcome:
    tail = _tail(ran.stderr)
    outcome = Outcome.failure(f"{what} exited with code {ran.returncode}"
                              + (f": {tail}" if tail else ""), "shell", **result)
    outcome.result = result
    return outcome


async def _run(argv: list[str], cfg: Mapping[str, JsonValue], timeout_s: float) -> _Ran:
    """Run one child process to its end or its timeout (its whole process group killed)."""
    cwd = cfg.get("cwd")
    started = time.monotonic()
    try:
        proc = await asyncio.create_subprocess_exec(
            *argv, cwd=str(cwd) if cwd else None, env=_environment(cfg.get("env")),
            stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE, start_new_session=True)
    except OSError as exc:
        raise _StartError(f"cannot start {argv[0]!r}: {exc}") from None
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
    return _Ran(out.decode("utf-8", errors="replace"), err.decode("utf-8", errors="replace"),
                proc.returncode, timed_out, int((time.monotonic() - started) * 1000))


async def _kill_group(proc: asyncio.subprocess.Process) -> None:
    # The child was started in a new session, so its pid is its process group id.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(ProcessLookupError):
        await proc.wait()
