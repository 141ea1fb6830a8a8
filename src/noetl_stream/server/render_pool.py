"""Where the server applies events: on its event loop while their templates render very quickly,
in a thread beside the loop while they render quickly, in a process of its own once they render
long.

The server's threads share one interpreter lock, so a render that takes a second in the applying
thread slows every other execution's events for that second. Each apply therefore starts on the
event loop with an allowance of template operations no larger than a render in the thread does
between two pauses (LOOP_OPERATIONS: the loop waits no longer than it would beside the thread,
and most applies, a guard or none, stay there without the hop to a thread and back, about 0.2 ms
a step). One that spends it is abandoned and done again, from the committed state, in the thread
with a larger allowance (INLINE_OPERATIONS, a few milliseconds of work); one that spends that
too is done again in a pool of processes, where the render has its whole budget
(dsl/template_budget.py) and no other execution waits for it. The router is a pure function of
its inputs and the budget a count, so where it ran changes no result. A process that is not done
within WALL_CLOCK_S (a machine so loaded that a budget of about a second of CPU takes minutes) is
ended and its apply fails like a crash: the events are handed back and come again.
"""

from __future__ import annotations

import asyncio
import logging
import multiprocessing
import os
import pickle
import threading
from collections.abc import Awaitable, Callable, Mapping
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from functools import partial
from typing import NamedTuple, ParamSpec, TypeVar

from nats.aio.msg import Msg

from noetl_stream import router
from noetl_stream.dsl.models import Playbook
from noetl_stream.dsl.template_budget import PAUSE_EVERY, RenderElsewhere, rendering_here

__all__ = ["INLINE_OPERATIONS", "LOOP_OPERATIONS", "Placed", "RenderElsewhere", "RenderPool",
           "apply_events", "apply_events_here", "apply_where_it_fits", "note_foreign_outcome",
           "rendering_here", "start_here", "start_where_it_fits"]
from noetl_stream.errors import NoetlStreamError
from noetl_stream.jsonutil import JsonObject
from noetl_stream.router.state import ExecutionState
from noetl_stream.router_events import RouterEvent
from noetl_stream.server.versions import Cached, playbook_for

log = logging.getLogger("noetl_stream.server")

INLINE_OPERATIONS = 5_000  # template operations an apply may spend in the server's own process
LOOP_OPERATIONS = PAUSE_EVERY  # of those, on the event loop itself (as long as a thread's turn)
WALL_CLOCK_S = 120.0  # for one apply in the pool, whose budget is about a second of CPU
PROCESSES = 1  # long renders take turns; each is bounded by its budget
# Long renders are background work: the host's scheduler gives the server's own process (and
# the workers and nats-server beside it) the CPU first.
NICENESS = 10

Events = list[RouterEvent]
Items = list[tuple[Msg, RouterEvent]]  # the events of a group with their deliveries
_P = ParamSpec("_P")
_T = TypeVar("_T")


class RenderPoolFailed(NoetlStreamError):
    """An apply in the pool did not come back (its process died or overran WALL_CLOCK_S)."""


def apply_events(cached: Cached, events: Events, now: float) -> bool:
    """Apply `events` to the cached state in place; False when one raised (the state is then
    half-applied). The outbox gathers every event's commands.
    """
    state, outbox = cached.state, []
    for recorded in events:
        note_foreign_outcome(cached.playbook, state, recorded)
        playbook, event = playbook_for(cached.playbook, cached.versions, recorded)
        try:
            router.apply(playbook, state, event, now)
        except Exception:
            log.exception("applying %s to %s failed", event.event_type, state.execution_id)
            return False
        cached.follow(state)
        outbox.extend(state.outbox)
    state.outbox = outbox
    return True


def apply_events_here(cached: Cached, events: Events, now: float,
                      operations: int = INLINE_OPERATIONS) -> bool | None:
    """`apply_events` within an allowance of `operations`; None when a render spent it (the
    cached state is then half-applied and must be loaded again).
    """
    try:
        return rendering_here(operations, lambda: apply_events(cached, events, now))
    except RenderElsewhere:
        return None


class Placed(NamedTuple):
    """An apply where it fitted: the cached state it was applied to (loaded again when it went
    past the loop's allowance), the items applied, whether every event applied, and the vars
    as they were before it (for the vars written beside the commit).
    """

    cached: Cached
    items: Items
    applied: bool
    vars_before: JsonObject


async def apply_where_it_fits(cached: Cached, items: Items, now: float,
                              reload: Callable[[Items], Awaitable[tuple[Cached, Items] | None]],
                              pool: RenderPool) -> Placed | None:
    """Apply the items' events on the event loop, in the thread, or in the pool, the first that
    fits their renders; each step up starts again from the state `reload` reads (None: nothing
    is left to apply, and this returns None).
    """
    vars_before = dict(cached.state.vars)
    applied = apply_events_here(cached, _events(items), now, LOOP_OPERATIONS)
    for elsewhere in ("thread", "pool"):
        if applied is not None:
            break
        if (again := await reload(items)) is None:
            return None
        cached, items = again
        vars_before = dict(cached.state.vars)
        applied = await asyncio.to_thread(apply_events_here, cached, _events(items), now) \
            if elsewhere == "thread" else await pool.apply(cached, _events(items), now)
    return Placed(cached, items, bool(applied), vars_before)


def _events(items: Items) -> Events:
    return [event for _, event in items]


def start_here(start: Callable[..., ExecutionState], playbook: Playbook,
               arguments: Mapping[str, object],
               operations: int = INLINE_OPERATIONS) -> ExecutionState:
    """`start(playbook, **arguments)` within an allowance of `operations` (RenderElsewhere past
    it: the caller starts it in the thread or the pool instead).
    """
    return rendering_here(operations, lambda: start(playbook, **arguments))


async def start_where_it_fits(started: Callable[..., _T],
                              in_pool: Callable[[], Awaitable[ExecutionState | Exception]]) -> _T:
    """`started(operations=...)` on the event loop within LOOP_OPERATIONS, else in the thread
    within its default allowance, else `started(made)` in the thread with the start `in_pool`
    made; each past its allowance raises RenderElsewhere and is made again from scratch.
    """
    try:
        return started(operations=LOOP_OPERATIONS)
    except RenderElsewhere:
        pass
    try:
        return await asyncio.to_thread(started)
    except RenderElsewhere:  # the start's templates render long: in the pool
        made = await in_pool()
    return await asyncio.to_thread(started, made)


def note_foreign_outcome(playbook: Playbook, state: ExecutionState, event: RouterEvent) -> None:
    """Say so when the router is about to drop an outcome from another pool than its command's."""
    expected = router.foreign_pool(playbook, state, event)
    if expected is not None:
        log.warning("%s of %s from pool %r dropped: its command went to pool %r",
                    router.cause_of(event), state.execution_id, getattr(event, "pool", None),
                    expected)


def _apply_events_in_child(cached: Cached, events: Events, now: float) -> tuple[Cached, bool]:
    applied = apply_events(cached, events, now)
    return cached, applied


def _start_in_child(start: Callable[..., ExecutionState], playbook: Playbook,
                    arguments: Mapping[str, object]) -> ExecutionState | Exception:
    try:
        return start(playbook, **arguments)
    except Exception as exc:
        return _crossing(exc)


def _crossing(exc: Exception) -> Exception:
    """`exc` as it is when it can cross the process boundary, else its text."""
    try:
        return pickle.loads(pickle.dumps(exc))  # type: ignore[no-any-return]
    except Exception:
        return RuntimeError(f"{type(exc).__name__}: {exc}")


def _apply_one_in_child(playbook: Playbook, state: ExecutionState, event: RouterEvent,
                        now: float) -> ExecutionState | Exception:
    try:
        router.apply(playbook, state, event, now)
    except Exception as exc:
        return _crossing(exc)
    return state


class RenderPool:
    """The processes long renders run in: started on the first one, ended with the server."""

    def __init__(self) -> None:
        self._pool: ProcessPoolExecutor | None = None
        self._starting = threading.Lock()  # two long renders at once start one pool

    async def apply(self, cached: Cached, events: Events, now: float) -> bool:
        """`apply_events` in a process of the pool; the cached object takes what it left."""
        done, applied = await self._run(_apply_events_in_child, cached, events, now)
        cached.state, cached.revision = done.state, done.revision
        cached.playbook, cached.key, cached.versions = done.playbook, done.key, done.versions
        return bool(applied)

    async def start(self, start: Callable[..., ExecutionState], playbook: Playbook,
                    arguments: Mapping[str, object]) -> ExecutionState | Exception:
        """`start(playbook, **arguments)` in a process of the pool: the new state, or what the
        start raised.
        """
        result: ExecutionState | Exception = await self._run(_start_in_child, start, playbook,
                                                              arguments)
        return result

    async def apply_one(self, playbook: Playbook, state: ExecutionState, event: RouterEvent,
                        now: float) -> ExecutionState:
        """`router.apply` of one event, in this process while its renders are short and in the
        pool past that; the state it leaves (the one given, or a copy from the pool). Raises
        what `router.apply` raised.
        """
        snapshot = await asyncio.to_thread(pickle.dumps, state)

        def here() -> bool:
            try:
                rendering_here(INLINE_OPERATIONS, lambda: router.apply(playbook, state, event, now))
            except RenderElsewhere:
                return False
            return True

        if await asyncio.to_thread(here):
            return state
        result = await self._run(_apply_one_in_child, playbook, pickle.loads(snapshot), event, now)
        if isinstance(result, Exception):
            raise result
        assert isinstance(result, ExecutionState)
        return result

    async def _run(self, fn: Callable[_P, _T], *args: _P.args, **kwargs: _P.kwargs) -> _T:
        # Starting processes (and the pool's locks) blocks: done beside the event loop.
        submitted = await asyncio.to_thread(self._submit, partial(fn, *args, **kwargs))
        try:
            return await asyncio.wait_for(asyncio.wrap_future(submitted), WALL_CLOCK_S)
        except (TimeoutError, BrokenProcessPool) as exc:
            await self.stop()  # a process overran or died: the next long render starts afresh
            raise RenderPoolFailed(f"a long template render did not finish within "
                                   f"{WALL_CLOCK_S:.0f} s or its process died") from exc

    def _submit(self, call: Callable[[], _T]) -> Future[_T]:
        with self._starting:
            if self._pool is None:
                # Spawned, not forked: the server has threads and open sockets a fork would copy.
                processes = min(PROCESSES, os.cpu_count() or 1)
                self._pool = ProcessPoolExecutor(
                    max_workers=processes, mp_context=multiprocessing.get_context("spawn"),
                    initializer=os.nice, initargs=(NICENESS,))
                log.info("long template renders run in a pool of %d processes", processes)
            return self._pool.submit(call)

    async def stop(self) -> None:
        pool, self._pool = self._pool, None
        if pool is not None:
            await asyncio.to_thread(_end, pool)


def _end(pool: ProcessPoolExecutor) -> None:
    for process in list((pool._processes or {}).values()):
        process.kill()  # one may be in a long render; its result is not wanted any more
    pool.shutdown(wait=False, cancel_futures=True)
