"""Drive the pure router without NATS: answer each command with a chosen outcome event.

`RouterHarness` starts an execution, keeps the commands the router asks for, and feeds back the
outcome events a worker would publish (`step.done`, `loop.iteration.done`, or their failures).
Everything is in memory and deterministic, so a test can replay, reorder or duplicate events:

    harness = RouterHarness(playbook)
    harness.run(lambda cmd: Reply(result={"n": 1}) if cmd["step"] == "fetch" else Reply())
    assert harness.state.status == "completed"
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass, field

from noetl_stream import jsonutil, messages
from noetl_stream.dsl.models import Playbook
from noetl_stream.jsonutil import JsonObject, JsonValue
from noetl_stream.router import ExecutionState, Outgoing, apply, start
from noetl_stream.router_events import router_event
from noetl_stream.subjects import DEFAULT_POOL

Command = JsonObject  # a command body, as the router's outbox holds it
Event = JsonObject  # an event as the server decodes it


@dataclass(frozen=True)
class Reply:
    """How a fake worker answers one command."""

    ok: bool = True
    result: JsonValue = None
    error: JsonObject | None = None
    ctx_patch: JsonObject = field(default_factory=dict)
    http: JsonObject | None = None
    exhausted: bool = False  # a cursor loop's claim found nothing: the iteration ran no tasks


Responder = Callable[[Command], Reply | None]
"""Chooses the reply to a command; None leaves the command unanswered."""


def outcome_event(command: Command, reply: Reply | None = None,
                  pool: str = DEFAULT_POOL, now: float = 0.0) -> Event:
    """The outcome event a worker of `pool` publishes for `command` (a command body from the
    outbox), as readers decode it: the pool comes from its subject.
    """
    reply = reply or Reply()
    error = reply.error
    if not reply.ok and error is None:
        error = {"message": "task failed"}
    cursor = {"cursor": {"exhausted": reply.exhausted}} if command.get("cursor") else {}
    iteration, parent = command.get("iteration"), command.get("parent_execution_id")
    body = messages.outcome_event(
        ok=reply.ok, execution_id=str(command["execution_id"]), step=str(command["step"]),
        step_run_id=str(command["step_run_id"]),
        iteration=iteration if isinstance(iteration, int) else None, timestamp=now,
        parent_execution_id=parent if isinstance(parent, str) else None,
        result=reply.result if reply.ok else None, error=None if reply.ok else error,
        ctx_patch=dict(reply.ctx_patch), http=reply.http, **cursor)
    return {**body, "pool": pool}


class RouterHarness:
    """One execution of `playbook`, driven by hand.

    `pending` holds the commands not yet answered, oldest first; `commands`, `events` (timers
    included), `cancels` (cancel requests for child executions) and `applied` record everything
    the router published and everything fed back to it.
    """

    def __init__(self, playbook: Playbook, *, execution_id: str = "exec1",
                 workload: JsonObject | None = None, now: float = 0.0,
                 parent_iter: JsonObject | None = None) -> None:
        self.playbook = playbook
        self.now = now
        self.commands: list[Command] = []
        self.pending: list[Command] = []
        self.events: list[Outgoing] = []
        self.cancels: list[Outgoing] = []
        self.applied: list[Event] = []
        self.state: ExecutionState = start(playbook, execution_id=execution_id,
                                           playbook_key=playbook.name,
                                           workload=dict(workload or playbook.workload), now=now,
                                           parent_iter=parent_iter)
        self._collect(self.state.outbox)

    # -- feeding events --------------------------------------------------------------------
    def send(self, event: Event) -> list[Outgoing]:
        """Apply one event; return (and record) the outbox it produced."""
        self.now += 1.0
        self.applied.append(copy.deepcopy(event))
        self.state = apply(self.playbook, self.state, router_event(event), self.now).state
        outbox = list(self.state.outbox)
        self._collect(outbox)
        return outbox

    def answer(self, command: Command, reply: Reply | None = None) -> list[Outgoing]:
        """Answer one pending command (removing it from `pending`)."""
        self.pending = [c for c in self.pending if c is not command]
        step = self.playbook.step(str(command.get("step")))
        return self.send(outcome_event(command, reply, step.pool or DEFAULT_POOL))

    def run(self, responder: Responder | None = None, *, max_events: int = 10_000) -> ExecutionState:
        """Answer pending commands oldest first until none is left or the responder holds back."""
        respond = responder or (lambda _command: Reply())
        for _ in range(max_events):
            choice = next(((c, r) for c in self.pending if (r := respond(c)) is not None), None)
            if choice is None:
                return self.state
            self.answer(*choice)
        raise RuntimeError(f"execution still running after {max_events} events")

    def signal(self, name: str, data: JsonValue = None, *, seq: int | None = None) -> list[Outgoing]:
        """Apply an external signal, as the server builds it from `<prefix>.events.<id>.signal.<name>`."""
        event: Event = {"event_type": f"signal.{name}", "execution_id": self.state.execution_id,
                        "data": data}
        if seq is not None:
            event["seq"] = seq
        return self.send(event)

    def child_started(self, command: Command, child_execution_id: str, *,
                      detached: bool = False) -> list[Outgoing]:
        """Apply the `child.started` the server records when `command`'s task starts a child."""
        return self.send({"event_type": "child.started", "execution_id": self.state.execution_id,
                          "child_execution_id": child_execution_id,
                          "step_run_id": command.get("step_run_id"),
                          "iteration": command.get("iteration"), "detached": detached})

    def fire_timer(self, timer: Outgoing) -> list[Outgoing]:
        """Apply the `timer.fired` event a timer the router asked for publishes when it is due."""
        return self.send(dict(timer.plain_body))

    # -- reading ---------------------------------------------------------------------------
    def timers(self) -> list[Outgoing]:
        """Timers the router asked for, oldest first (outbox messages of kind `timer`)."""
        return [o for o in self.events if o.kind == "timer"]

    def cancelled_children(self) -> list[str]:
        """Child executions the router asked to cancel, in order."""
        return [str(o.plain_body["execution_id"]) for o in self.cancels]

    def commands_for(self, step: str) -> list[Command]:
        return [c for c in self.commands if c.get("step") == step]

    def pending_for(self, step: str) -> list[Command]:
        return [c for c in self.pending if c.get("step") == step]

    def event_types(self) -> list[str]:
        return [o.event_type for o in self.events]

    def events_of(self, event_type: str) -> list[JsonObject]:
        return [o.plain_body for o in self.events if o.event_type == event_type]

    def fired_steps(self) -> list[str]:
        """Steps in the order the router started them (one entry per run)."""
        return [str(body["step"]) for body in self.events_of("step.started")]

    def _collect(self, outbox: list[Outgoing]) -> None:
        for message in outbox:
            if message.kind == "command":
                body = jsonutil.to_plain(message.body)  # as a worker reads it
                if not isinstance(body, dict):
                    raise TypeError(f"command {message.msg_id} does not encode as an object")
                self.commands.append(body)
                self.pending.append(body)
            elif message.kind == "cancel":
                self.cancels.append(message)
            else:
                self.events.append(message)
