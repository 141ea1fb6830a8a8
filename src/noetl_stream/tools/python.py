"""`python`: user code in warm child processes, one execution's each, with a timeout (ARCHITECTURE §8).

Inputs are globals (and `input_data`); the value is what the code assigns to `result`, returns
from `main(...)`, or returns at top level. The code also sees `context`, what the task's
templates see shaped the way NoETL's engines hand it to python code (`python_context`), and the
modules its `libs:` name. A child serves the steps of one execution only: what a step changes in
its interpreter (a module replaced, a global set) reaches no other execution. A child that times
out or dies is killed and replaced, so a bad script can never stop the worker, and its step
fails as retryable (kind `timeout` or `crash`). tools/python_runner.py runs the code.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import struct
import subprocess
import time
from collections.abc import Callable, Coroutine, Mapping
from typing import Any, NotRequired, TypedDict

from noetl_stream import jsonutil
from noetl_stream.dsl.layering import kind_default
from noetl_stream.dsl.values import ListView, job_view
from noetl_stream.jsonutil import JsonObject, JsonValue
from noetl_stream.tools.base import Outcome, TaskCall
from noetl_stream.tools.python_forks import ForkedProcess, ForkServer, ForkServerGone
from noetl_stream.tools.python_runner_source import runner_source
from noetl_stream.tools.python_sizing import PoolSizing, ReadyDemand
from noetl_stream.tools.python_slots import ENV_PYTHON_UIDS, SandboxUser
from noetl_stream.tools.python_tracebacks import authors_frames
from noetl_stream.tools.sandbox import (
    ENV_PYTHON_USER,
    SAME_USER,
    ChildPlace,
    Sandbox,
    SandboxError,
    make_sandbox,
)

log = logging.getLogger("noetl_stream.python")

DEFAULT_TIMEOUT_S = float(kind_default("python", "timeout"))  # dsl/layering.py: one table
KEPT_PER_PROCESS = 4  # interpreters kept alive per step that may run at once
# The places of ended children are cleared in batches: a clearing reads every entry of the
# shared writable folders once for all the slots it frees (tools/python_slots.py), a cost that
# does not grow with the batch. A batch starts once this many wait (of the uids a worker claims
# beyond those of its kept interpreters, half), once a new child waits for a uid, or at the
# latest CLEAR_WAIT_S after the first of it ended; until then a slot's uid serves no one.
CLEAR_WAIT_S = 0.25


class _Request(TypedDict):
    """What the worker sends a child (tools/python_runner.py reads it)."""

    code: str
    input: dict[str, object]
    context: dict[str, object]
    libs: NotRequired[JsonValue]
    filename: NotRequired[str]


class _CodeError(TypedDict, total=False):
    message: str
    kind: str  # "import" when a module was missing
    module: str
    type: str
    traceback: str


class _ModuleField(TypedDict, total=False):
    module: str  # the module an import error names


class _Reply(TypedDict, total=False):
    """What a child answers: the code's result, or why it failed, and what it printed."""

    status: str  # ok | error
    result: JsonValue
    error: _CodeError
    output: JsonObject


def encode_inputs(inputs: Mapping[str, object]) -> dict[str, object]:
    """Mark list views (loop results, an http list body) so the child rebuilds them as the
    mappings NoETL hands to code (`loop["stats"]`, `resp["status_code"]`, `resp.get("data")`),
    which iterate, count and index as their list (tools/python_runner.py ListView).
    """
    return {k: v.encoded() if isinstance(v, ListView) else v for k, v in inputs.items()}


def code_inputs(call: TaskCall) -> dict[str, Any]:
    """The names the code reads as inputs: in a loop step's iteration, its item (under the
    iterator's name), `_index` and `_total` first, as NoETL's server adds them to a python task's
    args; the task's own inputs win.
    """
    if call.command_iteration is None or not call.iteration:
        return call.input
    return {**{k: v for k, v in call.iteration.items() if k != "parent"}, **call.input}


def python_context(call: TaskCall) -> dict[str, object]:
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
    def __init__(self, proc: asyncio.subprocess.Process | ForkedProcess,
                 place: ChildPlace) -> None:
        self.proc = proc
        self.place = place
        self.idle_since = 0.0
        self.ended = False

    @classmethod
    async def spawn(cls, sandbox: Sandbox, user: SandboxUser | None,
                    forks: ForkServer | None = None) -> _Child:
        # Its own session, a clean environment and (under a root worker) a uid of its own:
        # tools/sandbox.py says what each one keeps from the code. Forked from the fork server
        # when there is one (tools/python_forks.py), else a new interpreter.
        place = await asyncio.to_thread(sandbox.open_place, user)
        try:
            if forks is not None:
                with contextlib.suppress(ForkServerGone):
                    return cls(await forks.fork(place), place)
            source = await asyncio.to_thread(runner_source)  # read once, then cached
            proc = await asyncio.create_subprocess_exec(
                sandbox.executable, "-u", "-P", "-c", source, *place.runner_args(),
                stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=None,
                env=place.env, cwd=place.folder, start_new_session=True,
                preexec_fn=place.preexec())
        except BaseException:
            await asyncio.to_thread(sandbox.close_place, place)
            raise
        return cls(proc, place)

    @property
    def alive(self) -> bool:
        return self.proc.returncode is None

    async def call(self, request: _Request) -> _Reply:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        data = jsonutil.dumps(request)
        self.proc.stdin.write(struct.pack(">I", len(data)) + data)
        await self.proc.stdin.drain()
        head = await self.proc.stdout.readexactly(4)
        (size,) = struct.unpack(">I", head)
        reply: _Reply = jsonutil.loads(await self.proc.stdout.readexactly(size))
        return reply

    def kill(self) -> None:
        if self.alive:
            with contextlib.suppress(ProcessLookupError):
                self.proc.kill()

    async def reap(self) -> None:
        # After a kill: the child is gone either way, and reaping must not raise.
        with contextlib.suppress(Exception):
            await self.proc.wait()


class PythonTool:
    """Interpreters are never shared between executions: a child runs the steps of one
    execution only (kept warm for its next step while it comes within the idle time), and a
    step of another execution gets a fresh one, started ahead so it pays no start-up: up to
    `warm` while new executions keep coming, fewer when they do not (tools/python_sizing.py).
    """

    kind = "python"

    def __init__(self, max_children: int = 8, warm: int | None = None,
                 sandbox: Sandbox | None = None, quiet_fallback: bool = False,
                 idle_s: float | None = None) -> None:
        self.max_children = max(1, max_children)  # steps running at once
        # Interpreters alive at once: executions whose steps interleave keep theirs between
        # steps (a fresh one per step would cost a fork and a slot clean-up each time).
        self.max_kept = self.max_children * KEPT_PER_PROCESS
        # `noetl-stream run`: the user's own playbook in their own session, where falling back
        # to their user is no news worth a warning on every run (it is still logged, at INFO).
        self.quiet_fallback = quiet_fallback
        # At most as many ready as steps may start at once: a burst of new executions takes
        # no more before the first of them frees its place (None: that many).
        self.warm = self.max_children if warm is None else min(warm, self.max_children)
        self.sizing = PoolSizing.from_env(idle_s=idle_s, ready_max=self.warm)
        self._demand = ReadyDemand(self.sizing)
        self._sandbox = sandbox
        self._fresh: list[_Child] = []  # never ran code
        self._idle: dict[str, list[_Child]] = {}  # by the execution whose steps they ran
        self._count = 0  # children alive, being started or being cleared away
        self._starting = 0  # fresh children being started in the background
        self._slots = asyncio.Semaphore(self.max_children)
        self._chores: set[asyncio.Task[None]] = set()
        # Children killed whose places are not cleared yet (tools/python_slots.py): cleared in
        # the background, so no step waits for it; a slot's uid serves no child before.
        self._dead: list[_Child] = []
        self._clearing = False
        self._place_cleared = asyncio.Event()
        self._clear_batch = max(1, self.max_children // 2)
        self._clear_now = asyncio.Event()  # a batch may be due before its time is up
        self._place_wanted = 0  # new children waiting for a uid
        self._expired_at = 0.0  # when idle children were last looked for
        self._reaper: asyncio.Task[None] | None = None
        self._forks: ForkServer | None = None
        self._closed = False

    @property
    def ready(self) -> int:
        """Fresh interpreters started and waiting for a new execution's first step."""
        return len(self._fresh)

    async def sandbox(self) -> Sandbox:
        """The children's sandbox, made on first use in a thread: it claims uids."""
        if self._sandbox is None:
            # A uid for each interpreter kept, and one more per step that may start a new one
            # while the uids of those just ended are still being cleared.
            self._sandbox = await asyncio.to_thread(make_sandbox,
                                                    slots=self.max_kept + self.max_children)
        return self._sandbox

    async def _spawn(self) -> _Child:
        """A new child, in a place of its own: a slot's uid waits until its clearing is done."""
        sandbox = await self.sandbox()
        while not sandbox.place_free:
            self._place_cleared.clear()
            self._place_wanted += 1
            self._clear_now.set()  # no uid is free: clear what is waiting now
            try:
                await self._place_cleared.wait()
            finally:
                self._place_wanted -= 1
        return await _Child.spawn(sandbox, sandbox.take_user(), self._forks)

    async def start(self) -> None:
        """Check that a child runs in the sandbox, then boot the fewest interpreters kept ready
        (tools/python_sizing.py) ahead of the first call, so the first step pays no start-up.
        """
        await self._check_sandbox()
        sandbox = await self.sandbox()
        if sandbox.forks:
            forks = ForkServer(sandbox, await asyncio.to_thread(runner_source))
            await forks.start()
            self._forks = forks
        ready = self.sizing.ready_min  # more only once new executions come
        self._count += ready
        children = await asyncio.gather(*(self._spawn() for _ in range(ready)))
        for child in children:
            child.idle_since = time.monotonic()
        self._fresh.extend(children)
        self._reaper = asyncio.create_task(self._reap_idle(), name="python-idle-reaper")

    async def _check_sandbox(self) -> None:
        """One round trip as a sandbox user. When that user cannot run the interpreter (it
        sits in a folder only root may enter), a user or uids the operator named are an error;
        by default children fall back to the worker's own user with a warning, since a root
        worker's children then run as root, as they did before users were changed.
        """
        sandbox = await self.sandbox()
        if sandbox.other_user is None:
            return
        problem = await _probe(sandbox)
        if problem is None:
            return
        if any(os.environ.get(name, "").strip() for name in (ENV_PYTHON_USER, ENV_PYTHON_UIDS)):
            raise SandboxError(f"python steps cannot run as {sandbox.other_user}: {problem}")
        log.log(logging.INFO if self.quiet_fallback else logging.WARNING,
                "python steps run as root: %s cannot run %s (%s); make the interpreter "
                "and its libraries readable by every user, or set %s=%s to choose the worker's "
                "user", sandbox.other_user, sandbox.executable, problem, ENV_PYTHON_USER,
                SAME_USER)
        await asyncio.to_thread(sandbox.close)
        self._sandbox = await asyncio.to_thread(make_sandbox, same_user=True)

    def _take_kept(self, execution_id: str) -> _Child | None:
        own = self._idle.get(execution_id)
        if not own:
            return None
        child = own.pop()
        if not own:
            del self._idle[execution_id]
        return child

    def _oldest_idle(self, idle_for: float = 0.0) -> _Child | None:
        oldest: tuple[float, str] | None = None
        for execution_id, children in self._idle.items():
            if oldest is None or children[0].idle_since < oldest[0]:
                oldest = (children[0].idle_since, execution_id)
        if oldest is None or time.monotonic() - oldest[0] < idle_for:
            return None
        children = self._idle[oldest[1]]
        child = children.pop(0)
        if not children:
            del self._idle[oldest[1]]
        return child

    async def _acquire(self, execution_id: str) -> _Child:
        """A child for `execution_id`: one that ran its earlier steps, else a fresh one, else a
        new one (ending the longest-idle child of another execution when all places are taken).
        """
        while True:
            child = self._take_kept(execution_id)
            if child is None and self._fresh:
                child = self._fresh.pop(0)
                self._demand.took(time.monotonic())
                self._refill()
            if child is not None:
                if child.alive:
                    return child
                self._end(child)
                continue
            if self._count < self.max_kept:
                self._count += 1
                self._demand.took(time.monotonic())
                self._recycle_stale()
                self._refill()  # more new executions may follow this one: start theirs
                try:
                    return await self._spawn()
                except BaseException:
                    self._count -= 1
                    raise
            victim = self._oldest_idle()
            if victim is not None:
                self._end(victim)
            else:  # every place is taken by a step or a child starting: one is free soon
                await asyncio.sleep(0.01)

    def _recycle_stale(self) -> None:
        """A new interpreter is starting: end the longest-idle kept one if its execution sent
        no step for `recycle_s`, so the pool grows only while every interpreter it holds is in
        use (an execution that ended leaves its interpreter idle until the idle time is up).
        """
        victim = self._oldest_idle(idle_for=self.sizing.recycle_s)
        if victim is not None:
            self._end(victim)

    def _release(self, child: _Child, execution_id: str) -> None:
        if self._closed or not child.alive:
            self._end(child)
            return
        child.idle_since = now = time.monotonic()
        self._idle.setdefault(execution_id, []).append(child)
        if now - self._expired_at >= self.sizing.idle_s / 20:  # not a walk of the pool per step
            self._expire_idle()

    def _expire_idle(self) -> None:
        """End children whose execution sent no step for the idle time, and fresh ones beyond
        what new executions took in that time (the longest-ready first).
        """
        self._expired_at = now = time.monotonic()
        idle_s = self.sizing.idle_s
        expired = [c for cs in self._idle.values() for c in cs if now - c.idle_since > idle_s]
        if expired:
            self._idle = {k: kept for k, cs in self._idle.items()
                          if (kept := [c for c in cs if c not in expired])}
        surplus = len(self._fresh) + self._starting - self._demand.target(now)
        while surplus > 0 and self._fresh and now - self._fresh[0].idle_since > idle_s:
            expired.append(self._fresh.pop(0))
            surplus -= 1
        for stale in expired:
            self._end(stale)

    async def _reap_idle(self) -> None:
        while not self._closed:
            await asyncio.sleep(self.sizing.idle_s / 3)
            self._expire_idle()

    def _refill(self) -> None:
        """Start fresh children in the background until as many are ready or starting as new
        executions took lately (tools/python_sizing.py, at most `warm`); when
        every place is taken, a child kept idle for another execution makes room (a fresh one
        serves any execution, a kept one only its own), but only one idle for `recycle_s`:
        its execution has most likely ended, while ending one whose execution still runs
        would make its next step start a child, which would end another, and so on.
        """
        if self._closed:
            return
        ready = self._demand.target(time.monotonic())
        for _ in range(ready - len(self._fresh) - self._starting):
            if self._count < self.max_kept:
                self._count += 1
                self._starting += 1
                self._recycle_stale()
                self._chore(self._spawn_fresh())
                continue
            victim = self._oldest_idle(idle_for=self.sizing.recycle_s)
            if victim is None:
                return
            self._end(victim)  # its end calls _refill again, with a free place

    async def _spawn_fresh(self) -> None:
        try:
            child = await self._spawn()
        except BaseException:
            self._count -= 1
            raise
        finally:
            self._starting -= 1
        if self._closed:
            self._end(child)
        else:
            child.idle_since = time.monotonic()  # ready since: surplus ones retire when idle
            self._fresh.append(child)

    def _end(self, child: _Child) -> None:
        """Kill `child` now; its place (its folder; a slot's leftovers) is cleared for the next
        child in the background, and a slot's uid is handed out again only once that is done.
        """
        if child.ended:
            return
        child.ended = True
        child.kill()
        self._count -= 1
        self._dead.append(child)
        if len(self._dead) >= self._clear_batch:
            self._clear_now.set()
        if not self._clearing:
            self._clearing = True
            self._chore(self._clear_dead())
        if not self._closed:
            self._refill()

    async def _clear_dead(self) -> None:
        """Clear the places of ended children, those ended meanwhile in one batch each round."""
        try:
            while self._dead:
                await self._batch_due()
                dead, self._dead = self._dead, []
                await asyncio.gather(*(child.reap() for child in dead))
                places = [child.place for child in dead]
                killed = await asyncio.gather(*(self._clear(place) for place in places))
                await asyncio.to_thread((await self.sandbox()).close_places, places,
                                        killed={user for user in killed if user is not None})
                self._place_cleared.set()
        finally:
            self._clearing = False
            self._place_cleared.set()  # a spawn waiting for a uid looks again
            if self._dead:  # ended while a failed round was being cleared
                self._clearing = True
                self._chore(self._clear_dead())

    async def _batch_due(self) -> None:
        """Until the ended children waiting make a batch, a new child waits for a uid, the pool
        closes, or CLEAR_WAIT_S is up.
        """
        deadline = time.monotonic() + CLEAR_WAIT_S
        while not (self._closed or self._place_wanted or len(self._dead) >= self._clear_batch):
            left = deadline - time.monotonic()
            if left <= 0:
                return
            self._clear_now.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._clear_now.wait(), left)

    async def _clear(self, place: ChildPlace) -> SandboxUser | None:
        """Kill what a slot's child left running through the fork server, when there is one;
        the user whose processes it killed, or None.
        """
        user = place.user
        if self._forks is None or user is None or not user.exclusive:
            return None
        try:
            await self._forks.clear(user)
        except ForkServerGone:
            return None
        return user

    def _chore(self, work: Coroutine[object, object, None]) -> None:
        task = asyncio.create_task(work)
        self._chores.add(task)
        task.add_done_callback(_chore_done(self._chores))

    async def run(self, call: TaskCall) -> Outcome:
        code = call.config.get("code")
        if not isinstance(code, str):
            return Outcome.failure("python task has no code", "config")
        timeout_s = call.timeout(DEFAULT_TIMEOUT_S)
        async with self._slots:
            child = await self._acquire(call.execution_id)
            try:
                request: _Request = {"code": code, "input": encode_inputs(code_inputs(call)),
                           "context": python_context(call), "libs": call.config.get("libs"),
                           "filename": _filename(call)}
                async with asyncio.timeout(timeout_s):  # unlike wait_for, no task per call
                    reply = await child.call(request)
            except TimeoutError:
                self._end(child)
                await child.reap()  # gone before the step's outcome says so
                return Outcome.failure(f"python code ran longer than its timeout of {timeout_s:g}s",
                                       "timeout", retryable=True)
            except (asyncio.IncompleteReadError, BrokenPipeError, ConnectionResetError):
                self._end(child)
                await child.reap()
                return Outcome.failure("python process died while running the code", "crash",
                                       retryable=True)
            except BaseException:
                # Cancelled mid-call: the child may still be busy, so it cannot go back to the pool.
                self._end(child)
                raise
            self._release(child, call.execution_id)
        output: JsonObject = reply.get("output") or {}
        # `meta.stdout` as before; the pipeline lifts `meta.output` into the outcome event.
        meta = {"stdout": output.get("stdout", ""), "output": output}
        if reply.get("status") == "ok":
            return Outcome.success(reply.get("result"), meta=meta)
        err: _CodeError = reply.get("error") or {}
        extra: _ModuleField = {"module": err["module"]} if err.get("module") else {}
        return Outcome.failure(str(err.get("message", "python code failed")),
                               "import" if err.get("kind") == "import" else "python",
                               exception_type=err.get("type"),
                               traceback=authors_frames(err.get("traceback")), meta=meta, **extra)

    async def close(self) -> None:
        self._closed = True
        self._clear_now.set()
        if self._reaper is not None:
            self._reaper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reaper
        children = self._fresh + [c for cs in self._idle.values() for c in cs]
        self._fresh, self._idle = [], {}
        for child in children:
            if child.proc.stdin is not None:
                child.proc.stdin.close()
        for child in children:
            self._end(child)
        while self._chores:  # the clearing, among them, may start more
            await asyncio.gather(*list(self._chores), return_exceptions=True)
        if self._forks is not None:
            await self._forks.close()
        if self._sandbox is not None:
            await asyncio.to_thread(self._sandbox.close)


def _chore_done(chores: set[asyncio.Task[None]]) -> Callable[[asyncio.Task[None]], None]:
    def done(task: asyncio.Task[None]) -> None:
        chores.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.warning("python child housekeeping failed: %s", task.exception())

    return done


PROBE_TIMEOUT_S = 30.0


async def _probe(sandbox: Sandbox) -> str | None:
    """Why a child cannot run code in `sandbox`, or None when it can."""
    try:
        child = await _Child.spawn(sandbox, sandbox.take_user())
    except (OSError, subprocess.SubprocessError) as exc:
        return f"{type(exc).__name__}: {exc}"
    try:
        reply = await asyncio.wait_for(child.call({"code": "result = 1", "input": {},
                                                   "context": {}}), PROBE_TIMEOUT_S)
    except (TimeoutError, asyncio.IncompleteReadError, BrokenPipeError, ConnectionResetError):
        return "the interpreter exited at start (see the worker's stderr)"
    finally:
        if child.proc.stdin is not None:
            child.proc.stdin.close()
        child.kill()
        await child.reap()
        await asyncio.to_thread(sandbox.close_place, child.place)
    return None if reply.get("status") == "ok" else str(reply.get("error"))
