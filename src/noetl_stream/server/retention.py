"""Retention per execution: nothing of a running execution ages out; a finished one is removed
NOETL_STREAM_RETENTION (default 30 days) after it finished (`noetl-stream executions purge`
removes them now).

No stream, bucket or store holding an execution's messages has an age limit (subjects/
topology.yaml): its events and durable timers in `NOETL_EVENTS`, its commands and requests in
their work queues until taken, its state, vars and step results in KV, its large results in the
object store. Every server sweeps every `sweep_period(retention)` (`RetentionSweeper`):
- a finished execution whose state was last written `retention` ago or more loses its events
  (a subject purge of `<prefix>.events.<id>.>`, pending timers included), vars, step results and
  then its state, the state last so that an interrupted purge is found and finished next time;
- vars and step results whose execution has no state any more go (an interrupted purge, or a
  state an earlier version wrote with a TTL);
- events of an execution that has no state (one published after its execution was purged, or
  left by a state that expired by the TTL of earlier versions) go once they have been seen
  without a state for `retention`;
- result objects no execution still kept can refer to go (server/result_sweep.py).

A running execution is never purged: the sweeper and `purge` skip every state whose status is
`running`, however old.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from nats.js.errors import APIError, NotFoundError

from noetl_stream import config, jsonutil
from noetl_stream.bus.connection import Bus
from noetl_stream.server.periodic import Periodic
from noetl_stream.server.result_sweep import purge_unreferenced_objects
from noetl_stream.state.kv_keys import bucket_keys
from noetl_stream.state.records import Skips

log = logging.getLogger("noetl_stream.retention")

EXECUTIONS_BUCKET = "noetl_executions"
VARS_BUCKET = "noetl_vars"
STEP_RESULTS_BUCKET = "noetl_step_results"  # state/step_results.py
SWEEP_EVERY_S = 3600.0


def sweep_period(retention_s: float) -> float:
    """How often a server sweeps: hourly, or a quarter of a shorter retention (at least 1 s), so
    a finished execution goes at most a quarter of its retention late.
    """
    return max(1.0, min(SWEEP_EVERY_S, retention_s / 4))


@dataclass(frozen=True)
class Finished:
    """A finished execution as the purge sees it: when its state was last written."""

    execution_id: str
    status: str
    finished_at: float


@dataclass(frozen=True)
class Kept:
    """An execution that has a state: its status, when it started and was last written."""

    execution_id: str
    status: str
    started_at: float
    written_at: float


async def kept_executions(bus: Bus, skips: Skips | None = None) -> list[Kept]:
    """Every execution that has a state in KV `noetl_executions`; a state that does not decode
    is left alone (never purged by age) and named in `skips`.
    """
    skips = skips if skips is not None else Skips("execution")
    found: list[Kept] = []
    for execution_id in await bucket_keys(bus.js, EXECUTIONS_BUCKET):
        try:
            msg = await bus.js.get_msg(f"KV_{EXECUTIONS_BUCKET}",
                                       subject=f"$KV.{EXECUTIONS_BUCKET}.{execution_id}")
        except NotFoundError:
            continue  # removed meanwhile (another purge)
        if not msg.data or msg.time is None:
            continue  # a delete marker
        state = jsonutil.loads_object(msg.data)
        if state is None:
            skips.add(execution_id, ValueError("the state is not a JSON object"))
            continue
        written_at = msg.time.timestamp()
        started = state.get("started_at")
        found.append(Kept(execution_id, str(state.get("status", "running")),
                          float(started) if isinstance(started, (int, float)) and started
                          else written_at, written_at))
    return found


def finished_among(kept: list[Kept], *, older_than_s: float, status: str | None,
                   now: float) -> list[Finished]:
    """The executions of `kept` not running whose state was last written `older_than_s` ago or
    more, with status `status` when given; oldest first.
    """
    found = [Finished(k.execution_id, k.status, k.written_at) for k in kept
             if k.status != "running" and now - k.written_at >= older_than_s
             and (status is None or k.status == status)]
    return sorted(found, key=lambda f: f.finished_at)


async def finished_executions(bus: Bus, *, older_than_s: float, status: str | None = None,
                              now: float | None = None, skips: Skips | None = None,
                              ) -> list[Finished]:
    """Executions not running whose state was last written `older_than_s` ago or more, with
    status `status` when given; oldest first. A state that does not decode is left alone and
    named in `skips`.
    """
    return finished_among(await kept_executions(bus, skips), older_than_s=older_than_s,
                          status=status, now=time.time() if now is None else now)


async def purge_execution(bus: Bus, execution_id: str) -> None:
    """Remove one execution's events (its pending timers too), vars, step results and state, the
    state last: an interrupted purge is found and finished by the next one.
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
    """Remove vars and step results whose execution has no state any more; the number of
    executions whose vars went.
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


async def executions_with_events(bus: Bus) -> set[str]:
    """The execution ids that have events in `NOETL_EVENTS`."""
    prefix = bus.topology.execution_events_filter("")[:-2]  # "<prefix>.events."
    info = await bus.js.stream_info("NOETL_EVENTS", subjects_filter=prefix + ">")
    return {subject[len(prefix):].split(".", 1)[0] for subject in info.state.subjects or {}}


@dataclass
class OrphanEvents:
    """Executions seen with events but no state, and since when: their events go once they have
    been seen so for the retention (events are only published once a state exists, so one that
    stays stateless that long was purged or expired).
    """

    since: dict[str, float] = field(default_factory=dict)

    async def purge(self, bus: Bus, *, retention_s: float, now: float) -> int:
        with_events = await executions_with_events(bus)  # before the states: see _purge_orphans
        orphans = with_events - set(await bucket_keys(bus.js, EXECUTIONS_BUCKET))
        self.since = {e: self.since.get(e, now) for e in orphans}
        gone = sorted(e for e, seen in self.since.items() if now - seen >= retention_s)
        for execution_id in gone:
            del self.since[execution_id]
            try:
                await bus.js.purge_stream("NOETL_EVENTS",
                                          subject=bus.topology.execution_events_filter(execution_id))
            except APIError as exc:  # a hostile id no filter can name: tried again later
                log.warning("retention: events of %r not purged: %s", execution_id[:200], exc)
        return len(gone)


class RetentionSweeper:
    """Every `every_s` seconds: purges finished executions older than the retention, the vars,
    step results and events left without a state, and result objects nothing kept refers to.
    """

    def __init__(self, bus: Bus, *, retention_s: float | None = None,
                 every_s: float | None = None, clock: Callable[[], float] = time.time) -> None:
        self.bus = bus
        self.retention_s = config.retention_s() if retention_s is None else retention_s
        self.every_s = sweep_period(self.retention_s) if every_s is None else every_s
        self.clock = clock
        self.orphans = OrphanEvents()
        # Not at once: a process that starts and stops quickly (`run`) should not pay for a sweep.
        self._periodic = Periodic("retention sweep", self.sweep, every_s=self.every_s,
                                  first_after_s=min(self.every_s, 60.0))

    async def start(self) -> None:
        self._periodic.start()

    async def stop(self) -> None:
        await self._periodic.stop()

    async def sweep(self) -> list[Finished]:
        now = self.clock()
        kept = await kept_executions(self.bus)
        purged = finished_among(kept, older_than_s=self.retention_s, status=None, now=now)
        for finished in purged:
            await purge_execution(self.bus, finished.execution_id)
        orphans = await purge_orphan_vars(self.bus)
        stray = await self.orphans.purge(self.bus, retention_s=self.retention_s, now=now)
        gone = {f.execution_id for f in purged}
        oldest = min([k.started_at for k in kept if k.execution_id not in gone] + [now])
        objects = await purge_unreferenced_objects(self.bus, oldest_start=oldest)
        if purged or orphans or stray or objects:
            log.info("retention: purged %d finished executions, vars of %d gone ones, events of "
                     "%d gone ones, %d result objects", len(purged), orphans, stray, objects)
        return purged
