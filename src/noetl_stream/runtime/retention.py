"""How long finished executions are kept, and removing them (`noetl-stream executions purge`).

Three things make a finished execution go away after NOETL_STREAM_RETENTION (default 30 days):
- its state in KV `noetl_executions` is written, when it finishes, with a per-key TTL
  (`Nats-TTL`) of the retention, so NATS drops it on its own;
- the events stream `NOETL_EVENTS` and the object store `noetl_results` have that max age (the
  stream never below its 20-minute duplicate window);
- every server sweeps once an hour (`RetentionSweeper`): finished executions older than the
  retention lose their events, vars, step results and state, and vars and step results whose
  execution is gone are removed.

A running execution is never purged: its state carries no TTL and the sweeper and `purge` skip
every state whose status is `running`. The stream's max age bounds the history of any execution
alike, so a running one older than the retention keeps its state (and resumes) but its oldest
events are gone from the log.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass

from nats.js.api import Header
from nats.js.errors import APIError, KeyWrongLastSequenceError, NotFoundError

from noetl_stream import config, jsonutil
from noetl_stream.runtime.connection import Bus
from noetl_stream.state.kv_keys import bucket_keys
from noetl_stream.state.records import Skips

log = logging.getLogger("noetl_stream.retention")

EXECUTIONS_BUCKET = "noetl_executions"
VARS_BUCKET = "noetl_vars"
STEP_RESULTS_BUCKET = "noetl_step_results"  # state/step_results.py
SWEEP_EVERY_S = 3600.0
_WRONG_LAST_SEQUENCE = (10071, 10164)


@dataclass(frozen=True)
class Finished:
    """A finished execution as the purge sees it: when its state was last written."""

    execution_id: str
    status: str
    finished_at: float


async def state_ttl_supported(bus: Bus) -> bool:
    """Whether the executions bucket accepts per-key TTLs (KV streams nats-py creates do)."""
    info = await bus.js.stream_info(f"KV_{EXECUTIONS_BUCKET}")
    return bool(getattr(info.config, "allow_msg_ttl", False))


async def write_finished_state(bus: Bus, execution_id: str, data: bytes, *, last: int,
                               ttl_s: float) -> int:
    """`kv.update` of a finished state with a per-key TTL; its new revision. Raises
    KeyWrongLastSequenceError when someone else wrote the key since revision `last`.
    """
    try:
        ack = await bus.js.publish(
            f"$KV.{EXECUTIONS_BUCKET}.{execution_id}", data,
            headers={Header.EXPECTED_LAST_SUBJECT_SEQUENCE.value: str(last)},
            msg_ttl=max(1, math.ceil(ttl_s)))  # whole seconds, never shorter than asked
    except APIError as exc:
        if exc.err_code in _WRONG_LAST_SEQUENCE:
            raise KeyWrongLastSequenceError(description=exc.description) from None
        raise
    return int(ack.seq)


async def finished_executions(bus: Bus, *, older_than_s: float, status: str | None = None,
                              now: float | None = None, skips: Skips | None = None,
                              ) -> list[Finished]:
    """Executions not running whose state was last written `older_than_s` ago or more, with
    status `status` when given; oldest first. A state that does not decode is left alone and
    named in `skips`.
    """
    skips = skips if skips is not None else Skips("execution")
    now = time.time() if now is None else now
    found: list[Finished] = []
    for execution_id in await bucket_keys(bus.js, EXECUTIONS_BUCKET):
        try:
            msg = await bus.js.get_msg(f"KV_{EXECUTIONS_BUCKET}",
                                       subject=f"$KV.{EXECUTIONS_BUCKET}.{execution_id}")
        except NotFoundError:
            continue  # removed meanwhile (its TTL, another purge)
        if not msg.data or msg.time is None:
            continue  # a delete marker
        state = jsonutil.loads_object(msg.data)
        if state is None:  # not a state: never purged by age, named instead
            skips.add(execution_id, ValueError("the state is not a JSON object"))
            continue
        state_status = str(state.get("status", "running"))
        finished_at = msg.time.timestamp()
        if state_status == "running" or now - finished_at < older_than_s:
            continue
        if status is None or state_status == status:
            found.append(Finished(execution_id, state_status, finished_at))
    return sorted(found, key=lambda f: f.finished_at)


async def purge_execution(bus: Bus, execution_id: str) -> None:
    """Remove one execution's events, vars and state, the state last: an interrupted purge is
    found and finished by the next one.
    """
    js = bus.js
    await js.purge_stream("NOETL_EVENTS", subject=bus.topology.execution_events_filter(execution_id))
    for bucket in (VARS_BUCKET, STEP_RESULTS_BUCKET):
        with contextlib.suppress(NotFoundError):
            await js.purge_stream(f"KV_{bucket}", subject=f"$KV.{bucket}.{execution_id}.>")
    await js.purge_stream(f"KV_{EXECUTIONS_BUCKET}", subject=f"$KV.{EXECUTIONS_BUCKET}.{execution_id}")


async def purge_finished(bus: Bus, *, older_than_s: float, status: str | None = None,
                         dry_run: bool = False, now: float | None = None) -> list[Finished]:
    """Remove finished executions older than `older_than_s` (with `status`, when given)."""
    found = await finished_executions(bus, older_than_s=older_than_s, status=status, now=now)
    if not dry_run:
        for finished in found:
            await purge_execution(bus, finished.execution_id)
    return found


async def purge_orphan_vars(bus: Bus) -> int:
    """Remove vars and step results whose execution has no state any more (it expired by its
    TTL); the number of executions whose vars went.
    """
    count = await _purge_orphans(bus, VARS_BUCKET)
    await _purge_orphans(bus, STEP_RESULTS_BUCKET)
    return count


async def _purge_orphans(bus: Bus, bucket: str) -> int:
    # Keys are listed before the states: an execution's entries are only written once its
    # state exists, so a state created in between is among the live ones.
    try:
        keys = await bucket_keys(bus.js, bucket)
    except NotFoundError:
        return 0
    owners = {key.split(".", 1)[0] for key in keys}
    live = set(await bucket_keys(bus.js, EXECUTIONS_BUCKET))
    for execution_id in sorted(owners - live):
        await bus.js.purge_stream(f"KV_{bucket}", subject=f"$KV.{bucket}.{execution_id}.>")
    return len(owners - live)


class RetentionSweeper:
    """Runs `purge_finished(retention)` and `purge_orphan_vars` every `every_s` seconds."""

    def __init__(self, bus: Bus, *, retention_s: float | None = None,
                 every_s: float = SWEEP_EVERY_S, clock: Callable[[], float] = time.time) -> None:
        self.bus = bus
        self.retention_s = config.retention_s() if retention_s is None else retention_s
        self.every_s = every_s
        self.clock = clock
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self._task = asyncio.create_task(self._loop(), name="retention")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def sweep(self) -> list[Finished]:
        purged = await purge_finished(self.bus, older_than_s=self.retention_s, now=self.clock())
        orphans = await purge_orphan_vars(self.bus)
        if purged or orphans:
            log.info("retention: purged %d finished executions, vars of %d gone ones",
                     len(purged), orphans)
        return purged

    async def _loop(self) -> None:
        # Not at once: a process that starts and stops quickly (`run`) should not pay for a sweep.
        await asyncio.sleep(min(self.every_s, 60.0))
        while True:
            try:
                await self.sweep()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # NATS busy or failing over: the next sweep tries again
                log.warning("retention sweep failed: %s", exc or type(exc).__name__)
            await asyncio.sleep(self.every_s)
