"""The stall check: a running execution never waits in silence for something that cannot come.

The router's own watchdog (router/watchdog.py) bounds how long a command may run, with a durable
timer. What it cannot see is the loss of what it waits on: a command removed from
`NOETL_COMMANDS` by hand (or a terminated unreadable one), a timer schedule deleted from
`NOETL_EVENTS`. Every `every_s` seconds each server reads the state of every running execution
and looks for what it waits on:

- each command in flight (a step run, or a loop iteration) must be in `NOETL_COMMANDS`: a worker
  removes it only by acknowledging it, after its outcome is stored. A command issued more than
  `every_s` ago and missing on two checks in a row is lost if no outcome for it is on its way:
  nothing of the execution waits in `NOETL_ROUTER`, the state read again after that still waits
  for it, and `NOETL_EVENTS` holds no outcome of it (one not yet copied to the router's stream).
  If it is still in the committed outbox, it was never published (a server stopped between
  commit and publish) and goes out now; otherwise its step run or iteration fails with error
  kind `lost` and the reason.
- a command in flight still in the work queue after its max deliveries (delivered, while no
  command of its pool is in progress) was never dead-lettered: its advisory found no room (a full
  store) and JetStream sends none again. It is dead-lettered as the advisory would have done it
  (bus/dead_letters.py `dead_letter_command`), on two checks in a row as above.
- each listener timer (`ExecutionState.timers`) and each watchdog deadline overdue by more than
  `every_s` on two checks in a row, under the same conditions (no `timer.fired` for it anywhere;
  a listener's schedule message gone too), never fired: the run fails with kind `lost` (a
  listener) or `timeout` (a watchdog whose timer was lost), and the reason.
- each delayed arc's token (`ExecutionState.delayed`) overdue the same way: no step waits for it,
  so it is delivered late (its `timer.fired` is published) instead, with a warning in the log.

The failure is the one the worker would have published, under the worker's msg id
(bus/dead_letters.py `publish_step_failure`), so a real outcome and this one never both
count, and the router applies it like any failure: its retry and failure arcs apply. The check
is pure reading until it publishes, and several servers checking at once publish the same ids.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from nats.js.errors import NotFoundError

from noetl_stream import config, ids, jsonutil
from noetl_stream.bus.connection import Bus
from noetl_stream.bus.dead_letters import dead_letter_command, publish_step_failure
from noetl_stream.bus.publish import publish_event, subject_of
from noetl_stream.dsl.models import Playbook
from noetl_stream.errors import NoetlStreamError, OutcomeErrorKind
from noetl_stream.events import ErrorInfo
from noetl_stream.isotime import iso_time
from noetl_stream.jsonutil import JsonObject
from noetl_stream.router.state import ExecutionState
from noetl_stream.server.periodic import Periodic
from noetl_stream.server.playbook_parsing import ParsedPlaybooks
from noetl_stream.server.retention import EXECUTIONS_BUCKET, sweep_period
from noetl_stream.state.kv_keys import bucket_keys
from noetl_stream.subjects import DEFAULT_POOL

log = logging.getLogger("noetl_stream.stalls")

COMMANDS_STREAM = "NOETL_COMMANDS"


@dataclass(frozen=True)
class Wait:
    """One thing a running execution waits for."""

    key: str  # stable across checks
    what: str  # "command", "timer", "watchdog" or "delay"
    step: str
    run_id: str  # "" for a delayed token (no run waits for it)
    iteration: int | None
    pool: str = DEFAULT_POOL
    msg_id: str = ""  # a command's
    since: float = 0.0  # a command: issued at; a timer or deadline: due at
    name: str = ""  # a listener timer's


@dataclass(frozen=True)
class Exhausted:
    """A command still in the work queue after its max deliveries."""

    seq: int
    consumer: str
    max_deliver: int


class StallCheck:
    """Finds the lost waits of running executions and fails them (see the module's docstring)."""

    def __init__(self, bus: Bus, *, every_s: float | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        self.bus = bus
        self.every_s = sweep_period(config.retention_s()) if every_s is None else every_s
        self.clock = clock
        self._suspects: set[str] = set()
        self._playbooks = ParsedPlaybooks()
        self._periodic = Periodic("stall check", self.check, every_s=self.every_s)

    async def start(self) -> None:
        self._periodic.start()

    async def stop(self) -> None:
        await self._periodic.stop()

    async def check(self) -> int:
        """One pass; the number of lost waits it acted on."""
        now = self.clock()
        waits: list[tuple[ExecutionState, Wait]] = []
        for execution_id in await bucket_keys(self.bus.js, EXECUTIONS_BUCKET):
            try:
                state = await self._running_state(execution_id)
                if state is not None:
                    waits += [(state, w) for w in await self._waits(state, now)]
            except (NoetlStreamError, ValueError, KeyError) as exc:  # one unreadable state or playbook
                log.warning("stall check skips execution %s: %s", execution_id, exc)
        stored = await self._stored_commands({w.pool for _, w in waits if w.what == "command"})
        exhausted = await self._exhausted(stored)
        suspects = {w.key for state, w in waits if w.what != "command" or
                    w.msg_id not in stored or w.msg_id in exhausted}
        acted = 0
        for state, wait in waits:
            if wait.key in suspects and wait.key in self._suspects and \
                    not await self._events_pending(state.execution_id):
                # Read again after looking at the router's stream: an outcome applied since the
                # first read was committed before it left that stream.
                fresh = await self._running_state(state.execution_id)
                if fresh is not None and wait.key in {w.key for w in await self._waits(fresh, now)} \
                        and not await self._answer_stored(fresh.execution_id, wait):
                    acted += await self._act(fresh, wait, now, exhausted.get(wait.msg_id))
        self._suspects = suspects
        return acted

    async def _running_state(self, execution_id: str) -> ExecutionState | None:
        try:
            msg = await self.bus.js.get_msg(f"KV_{EXECUTIONS_BUCKET}",
                                            subject=f"$KV.{EXECUTIONS_BUCKET}.{execution_id}")
        except NotFoundError:
            return None
        if not msg.data:
            return None
        raw = jsonutil.loads(msg.data)
        if raw.get("status", "running") != "running":
            return None
        return ExecutionState.from_dict(raw)

    async def _playbook(self, key: str) -> Playbook:
        return self._playbooks.get(key) or await self._playbooks.load(
            await self.bus.js.key_value("noetl_catalog"), key)

    async def _waits(self, state: ExecutionState, now: float) -> list[Wait]:
        """What the execution waits for and is overdue enough to be suspected."""
        pb = await self._playbook(state.playbook_key)
        out: list[Wait] = []
        for run in state.active_runs:
            step = pb.step(run.step)
            base = f"{state.execution_id}|{run.run_id}"
            # A failure counts only on the pool of the step's commands (router foreign_pool).
            pool = step.pool or DEFAULT_POOL
            if step.eval_mode == "on_event":
                out += [Wait(f"{base}|timer|{name}", "timer", run.step, run.run_id, None,
                             pool=pool, since=due, name=name)
                        for name, due in sorted(state.timers.get(run.run_id, {}).items())
                        if now - due > self.every_s]
                continue
            commands: list[tuple[int | None, float, float | None]] = (
                [(None, run.issued_at, run.deadline)] if run.loop is None else
                [(i, run.loop.issued_at.get(str(i), run.issued_at),
                  run.loop.deadlines.get(str(i))) for i in run.loop.in_flight])
            for index, issued, deadline in commands:
                it = "-" if index is None else str(index)
                if now - issued > self.every_s:
                    out.append(Wait(f"{base}|{it}|command", "command", run.step, run.run_id,
                                    index, pool=pool,
                                    msg_id=ids.command_msg_id(run.run_id, index), since=issued))
                if deadline is not None and now - deadline > self.every_s:
                    out.append(Wait(f"{base}|{it}|watchdog", "watchdog", run.step, run.run_id,
                                    index, pool=pool, since=deadline))
        out += [Wait(f"{state.execution_id}|delay|{timer_id}", "delay", token.src, "", None,
                     since=token.fire_at, name=timer_id)
                for timer_id, token in sorted(state.delayed.items())
                if now - token.fire_at > self.every_s]
        return out

    async def _stored_commands(self, pools: set[str]) -> dict[str, tuple[str, int]]:
        """The commands stored for `pools` (a work queue: none is taken yet), by msg id: their
        pool and stream sequence.
        """
        found: dict[str, tuple[str, int]] = {}
        for pool in sorted(pools):
            subject = self.bus.topology.command_filter(pool)
            seq = 1
            while True:
                try:
                    msg = await self.bus.js.get_msg(COMMANDS_STREAM, seq=seq, subject=subject,
                                                    next=True)
                except NotFoundError:
                    break
                seq = int(msg.seq or seq)
                found[str((msg.headers or {}).get("Nats-Msg-Id", ""))] = (pool, seq)
                seq += 1
        return found

    async def _exhausted(self, stored: dict[str, tuple[str, int]]) -> dict[str, Exhausted]:
        """The stored commands that reached their max deliveries: delivered (at or below the
        pool consumer's delivered sequence) while none of the pool's commands is in progress
        (no acknowledgement pending), yet still in the work queue. JetStream delivers such a
        command no more; its max-deliveries advisory normally dead-letters it, but an advisory
        refused by a full store is never sent again.
        """
        found: dict[str, Exhausted] = {}
        for pool in sorted({p for p, _ in stored.values()}):
            durable = self.bus.topology.pool_consumer(pool).durable
            try:
                info = await self.bus.js.consumer_info(COMMANDS_STREAM, durable)
            except NotFoundError:
                continue
            if info.num_ack_pending or info.delivered is None:
                continue  # some command is in progress: which ones are done cannot be told
            delivered = int(info.delivered.stream_seq or 0)
            found |= {msg_id: Exhausted(seq, durable, int(info.config.max_deliver or 0))
                      for msg_id, (p, seq) in stored.items() if p == pool and seq <= delivered}
        return found

    async def _events_pending(self, execution_id: str) -> bool:
        """Whether events of the execution wait in the router's stream (an outcome or a fired
        timer on its way: nothing is lost yet).
        """
        router = self.bus.topology.router_decl()
        info = await self.bus.js.stream_info(
            router.stream, subjects_filter=f"{router.subject_prefix}.*.{execution_id}.>")
        return bool(info.state.subjects)

    async def _answer_stored(self, execution_id: str, wait: Wait) -> bool:
        """Whether the events stream holds what the wait waits for (an outcome, a fired timer)
        that has not reached the router's stream yet.
        """
        match: JsonObject = {"step_run_id": wait.run_id} if wait.run_id else {}
        if wait.what == "command":
            types = "step.*" if wait.iteration is None else "loop.iteration.*"
            match["iteration"] = wait.iteration
        else:
            types = "timer.fired"
            match.update({"iteration": wait.iteration} if wait.what == "watchdog" else
                         {"timer_id": wait.name})
        subject = self.bus.topology.event_subject(execution_id, types)
        seq = 1
        while True:
            try:
                msg = await self.bus.js.get_msg("NOETL_EVENTS", seq=seq, subject=subject, next=True)
            except NotFoundError:
                return False
            body = jsonutil.loads(msg.data or b"{}")
            if isinstance(body, dict) and all(body.get(k) == v for k, v in match.items()) and \
                    body.get("event_type") not in ("step.started", "step.skipped"):
                return True
            seq = int(msg.seq or seq) + 1

    async def _act(self, state: ExecutionState, wait: Wait, now: float,
                   exhausted: Exhausted | None = None) -> int:
        if wait.what == "delay":
            return await self._deliver_late(state, wait)
        if exhausted is not None:
            dead = await dead_letter_command(
                self.bus, COMMANDS_STREAM, exhausted.seq, exhausted.max_deliver,
                exhausted.consumer, now, detail=f"delivered {exhausted.max_deliver} times without "
                "an outcome, and its max-deliveries advisory was never stored")
            return int(dead)
        if wait.what == "command":
            if await self._publish_unpublished(state, wait.msg_id):
                return 1
            reason = (f"its command {wait.msg_id} is gone from {COMMANDS_STREAM} (removed) and "
                      "no outcome came for it")
            kind: OutcomeErrorKind = "lost"
        elif wait.what == "timer":
            if await self._schedule_exists(state.execution_id, wait.name):
                return 0  # not fired yet, but still there: nats-server is late, nothing is lost
            reason = (f"its timer {wait.name}, due at {iso_time(wait.since)}, never fired: its "
                      "schedule is gone from NOETL_EVENTS")
            kind = "lost"
        else:
            reason = (f"no outcome by its deadline {iso_time(wait.since)} (spec.timeout), and the "
                      "watchdog timer that should have ended it never fired")
            kind = "timeout"
        log.warning("execution %s step %s: %s", state.execution_id, wait.step, reason)
        where = {} if wait.iteration is None else {"iteration": wait.iteration}
        error = ErrorInfo(message=reason, kind=kind, source="watchdog", **where)
        await publish_step_failure(self.bus, {
            "execution_id": state.execution_id, "step": wait.step,
            "step_run_id": wait.run_id, "iteration": wait.iteration,
            "parent_execution_id": state.parent_execution_id}, error, now, pool=wait.pool)
        return 1

    async def _deliver_late(self, state: ExecutionState, wait: Wait) -> int:
        """A delayed arc's token whose timer never fired: no step waits for it, so nothing can
        fail; its delay has passed, so the token is delivered now, as the timer would have.
        """
        if await self._schedule_exists(state.execution_id, wait.name):
            return 0
        token = state.delayed[wait.name]
        log.warning("execution %s: the timer %s of the delayed arc %s -> %s, due at %s, never "
                    "fired (its schedule is gone); delivering the token now", state.execution_id,
                    wait.name, token.src, token.dst, iso_time(token.fire_at))
        body = {"event_type": "timer.fired", "execution_id": state.execution_id,
                "step": token.src, "timer_id": wait.name, "fire_at": token.fire_at,
                "timestamp": time.time(), "late": "its schedule was lost",
                "data": {"timer_id": wait.name, "name": wait.name, "step": token.src,
                         "to": token.dst}}
        await publish_event(self.bus, state.execution_id, "timer.fired",
                            ids.event_msg_id(state.execution_id, "timer.fired", wait.name, "late"),
                            body)
        return 1

    async def _publish_unpublished(self, state: ExecutionState, msg_id: str) -> bool:
        """Publish the command `msg_id` if the committed outbox holds it and it was never
        stored; whether it was. One the stream had stored (a duplicate) was removed since.
        """
        for m in state.outbox:
            if m.kind == "command" and m.msg_id == msg_id:
                ack = await self.bus.js.publish(subject_of(self.bus, m), jsonutil.dumps(m.body),
                                                headers={"Nats-Msg-Id": m.msg_id})
                if not ack.duplicate:
                    log.warning("execution %s: command %s was committed but never published; "
                                "published it now", state.execution_id, msg_id)
                return not ack.duplicate
        return False

    async def _schedule_exists(self, execution_id: str, timer: str) -> bool:
        subject = self.bus.topology.timer_schedule_subject(execution_id, timer)
        try:
            await self.bus.js.get_msg("NOETL_EVENTS", subject=subject)
        except NotFoundError:
            return False
        return True
