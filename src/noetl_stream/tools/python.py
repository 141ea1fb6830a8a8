"""`python`: user code in a pool of warm child processes, with a timeout (ARCHITECTURE §8).

Inputs are globals (and `input_data`); the value is what the code assigns to `result`, returns
from `main(...)`, or returns at top level. The code also sees `context`, what the task's
templates see shaped the way NoETL's engines hand it to python code (`python_context`), and the
modules its `libs:` name. A child that times out or dies is killed and replaced, so a bad script
can never stop the worker. tools/python_runner.py runs the code.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import struct
from pathlib import Path
from typing import Any

from noetl_stream import jsonutil
from noetl_stream.dsl.layering import kind_default
from noetl_stream.dsl.values import ListView, job_view
from noetl_stream.tools.base import Outcome, TaskCall
from noetl_stream.tools.sandbox import ENV_PYTHON_USER, SAME_USER, Sandbox, SandboxError, make_sandbox

log = logging.getLogger("noetl_stream.python")

RUNNER = Path(__file__).with_name("python_runner.py")
DEFAULT_TIMEOUT_S = float(kind_default("python", "timeout"))  # dsl/layering.py: one table


def encode_inputs(inputs: dict[str, Any]) -> dict[str, Any]:
    """Mark list views (loop results, an http list body) so the child rebuilds them as the
    mappings NoETL hands to code (`loop["stats"]`, `resp["status_code"]`, `resp.get("data")`),
    which iterate, count and index as their list (tools/python_runner.py ListView).
    """
    return {k: v.encoded() if isinstance(v, ListView) else v for k, v in inputs.items()}


def python_context(call: TaskCall) -> dict[str, Any]:
    """The `context` python code reads: the names the task's templates read (workload, ctx,
    iter, vars, finished step results by step name, earlier task results of the step, keychain,
    and workload / ctx / args keys as bare names, as in NoETL's render context), plus NoETL's
    `execution_id`, `step`, `job` and the task's inputs as `args` and `input`.
    """
    context = dict(call.context or {})
    context.update({
        "execution_id": call.execution_id,
        "step": call.step,
        "job": job_view(call.execution_id),
        "args": call.input,
        "input": call.input,
    })
    return encode_inputs(context)


def _filename(call: TaskCall) -> str:
    """The name tracebacks give the code: its script file when it came from one."""
    script = call.config.get("script")
    uri = script.get("uri") if isinstance(script, dict) else None
    return str(uri) if uri else "<playbook code>"


class _Child:
    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc

    @classmethod
    async def spawn(cls, sandbox: Sandbox) -> _Child:
        # Its own session, a clean environment and (under a root worker) another user:
        # tools/sandbox.py says what each one keeps from the code.
        proc = await asyncio.create_subprocess_exec(
            sandbox.executable, "-u", "-P", str(RUNNER), stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE, stderr=None, env=sandbox.env, cwd=sandbox.cwd,
            start_new_session=True, preexec_fn=sandbox.preexec())
        return cls(proc)

    @property
    def alive(self) -> bool:
        return self.proc.returncode is None

    async def call(self, request: dict[str, Any]) -> dict[str, Any]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        data = jsonutil.dumps(request)
        self.proc.stdin.write(struct.pack(">I", len(data)) + data)
        await self.proc.stdin.drain()
        head = await self.proc.stdout.readexactly(4)
        (size,) = struct.unpack(">I", head)
        reply: dict[str, Any] = jsonutil.loads(await self.proc.stdout.readexactly(size))
        return reply

    async def kill(self) -> None:
        if self.alive:
            with contextlib.suppress(ProcessLookupError):
                self.proc.kill()
        # Reaping after a kill: the child is gone either way, and killing must not raise.
        with contextlib.suppress(Exception):
            await self.proc.wait()


class PythonTool:
    kind = "python"

    def __init__(self, max_children: int = 8, warm: int = 2,
                 sandbox: Sandbox | None = None, quiet_fallback: bool = False) -> None:
        self.max_children = max_children
        # `noetl-stream run`: the user's own playbook in their own session, where falling back
        # to their user is no news worth a warning on every run (it is still logged, at INFO).
        self.quiet_fallback = quiet_fallback
        self.warm = warm
        self._sandbox = sandbox
        self._idle: list[_Child] = []
        self._count = 0
        self._slots = asyncio.Semaphore(max_children)
        self._closed = False

    async def sandbox(self) -> Sandbox:
        """The children's sandbox, made on first use in a thread: it creates a private folder."""
        if self._sandbox is None:
            self._sandbox = await asyncio.to_thread(make_sandbox)
        return self._sandbox

    async def start(self) -> None:
        """Check that a child runs in the sandbox, then boot `warm` interpreters ahead of the
        first call, so the first step pays no start-up.
        """
        await self._check_sandbox()
        sandbox = await self.sandbox()
        children = await asyncio.gather(*(_Child.spawn(sandbox) for _ in range(self.warm)))
        self._idle.extend(children)
        self._count += len(children)

    async def _check_sandbox(self) -> None:
        """One round trip as the sandbox user. When that user cannot run the interpreter (it
        sits in a folder only root may enter), a user the operator named is an error; the
        default `nobody` falls back to the worker's own user with a warning, since a root
        worker's children then run as root, as they did before users were changed.
        """
        sandbox = await self.sandbox()
        if sandbox.user is None:
            return
        problem = await _probe(sandbox)
        if problem is None:
            return
        if os.environ.get(ENV_PYTHON_USER, "").strip():
            raise SandboxError(f"python steps cannot run as {sandbox.user.name}: {problem}")
        log.log(logging.INFO if self.quiet_fallback else logging.WARNING,
                "python steps run as root: user %s cannot run %s (%s); make the interpreter "
                "and its libraries readable by that user, set %s to a user who can, or %s=%s "
                "to choose the worker's user", sandbox.user.name, sandbox.executable, problem,
                ENV_PYTHON_USER, ENV_PYTHON_USER, SAME_USER)
        self._sandbox = await asyncio.to_thread(make_sandbox, same_user=True)
        if sandbox.cwd:
            await asyncio.to_thread(shutil.rmtree, sandbox.cwd, ignore_errors=True)

    async def _acquire(self) -> _Child:
        while self._idle:
            child = self._idle.pop()
            if child.alive:
                return child
            self._count -= 1
        self._count += 1
        return await _Child.spawn(await self.sandbox())

    def _release(self, child: _Child) -> None:
        if self._closed or not child.alive:
            self._count -= 1
            return
        self._idle.append(child)

    async def run(self, call: TaskCall) -> Outcome:
        code = call.config.get("code")
        if not isinstance(code, str):
            return Outcome.failure("python task has no code", "config")
        timeout_s = call.timeout(DEFAULT_TIMEOUT_S)
        async with self._slots:
            child = await self._acquire()
            try:
                request = {"code": code, "input": encode_inputs(call.input),
                           "context": python_context(call), "libs": call.config.get("libs"),
                           "filename": _filename(call)}
                reply = await asyncio.wait_for(child.call(request),
                                               timeout_s)
            except TimeoutError:
                await child.kill()
                self._release(child)
                return Outcome.failure(f"python code ran longer than its timeout of {timeout_s:g}s",
                                       "timeout", retryable=True)
            except (asyncio.IncompleteReadError, BrokenPipeError, ConnectionResetError):
                await child.kill()
                self._release(child)
                return Outcome.failure("python process died while running the code", "crash",
                                       retryable=True)
            except BaseException:
                # Cancelled mid-call: the child may still be busy, so it cannot go back to the pool.
                await child.kill()
                self._release(child)
                raise
            self._release(child)
        output = reply.get("output") or {}
        # `meta.stdout` as before; the pipeline lifts `meta.output` into the outcome event.
        meta = {"stdout": output.get("stdout", ""), "output": output}
        if reply.get("status") == "ok":
            return Outcome.success(reply.get("result"), meta=meta)
        err = reply.get("error") or {}
        extra = {"module": err["module"]} if err.get("module") else {}
        return Outcome.failure(str(err.get("message", "python code failed")),
                               "import" if err.get("kind") == "import" else "python",
                               exception_type=err.get("type"),
                               traceback=err.get("traceback"), meta=meta, **extra)

    async def close(self) -> None:
        self._closed = True
        children, self._idle = self._idle, []
        for child in children:
            if child.proc.stdin is not None:
                child.proc.stdin.close()
        await asyncio.gather(*(c.kill() for c in children))
        if self._sandbox is not None and self._sandbox.cwd:
            await asyncio.to_thread(shutil.rmtree, self._sandbox.cwd, ignore_errors=True)


PROBE_TIMEOUT_S = 30.0


async def _probe(sandbox: Sandbox) -> str | None:
    """Why a child cannot run code in `sandbox`, or None when it can."""
    try:
        child = await _Child.spawn(sandbox)
    except OSError as exc:
        return f"{type(exc).__name__}: {exc}"
    try:
        reply = await asyncio.wait_for(child.call({"code": "result = 1", "input": {},
                                                   "context": {}}), PROBE_TIMEOUT_S)
    except (TimeoutError, asyncio.IncompleteReadError, BrokenPipeError, ConnectionResetError):
        return "the interpreter exited at start (see the worker's stderr)"
    finally:
        if child.proc.stdin is not None:
            child.proc.stdin.close()
        await child.kill()
    return None if reply.get("status") == "ok" else str(reply.get("error"))
