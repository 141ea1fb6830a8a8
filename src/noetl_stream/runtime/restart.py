"""Asking for a restart: checks the committed state, then publishes `execution.restart.requested`
in the execution's log, where the router applies it like any event (router/restart.py).

The event's msg id carries the restart's number (the state's count plus one), so asking twice
for the same restart (a double click, a retried call) publishes it once. The router checks again
when it applies it: a restart this check let through but the state no longer allows (it changed
meanwhile) is answered with `event.ignored` and changes nothing.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from nats.js.errors import KeyNotFoundError

from noetl_stream import ids, messages
from noetl_stream.dsl import parse_playbook
from noetl_stream.errors import RestartRefused
from noetl_stream.router.restart import REQUESTED, RESTARTED, refusal
from noetl_stream.runtime.connection import Bus
from noetl_stream.runtime.publish import publish_event
from noetl_stream.runtime.verify import committed_state
from noetl_stream.state.results import ResultStore
from noetl_stream.state.step_results import StepResults
from noetl_stream.tools.registry import installed_kinds


@dataclass(frozen=True)
class RestartAsked:
    execution_id: str
    restart: int  # its number: the router's `execution.restarted` carries it
    restarted_id: str  # msg id of the `execution.restarted` that says it was applied
    ignored_id: str  # msg id of the `event.ignored` that says it was refused

    def as_json(self) -> dict[str, Any]:
        return {"execution_id": self.execution_id, "restart": self.restart}


async def request_restart(bus: Bus, execution_id: str, *, from_step: str | None = None,
                          workload: dict[str, Any] | None = None,
                          requested_by: str | None = None) -> RestartAsked:
    state = None if messages.execution_id_problem(execution_id) else \
        await committed_state(bus, execution_id, StepResults(bus.js, ResultStore(bus.js)))
    if state is None:
        raise RestartRefused(f"no execution {execution_id} is known", unknown=True)
    catalog = await bus.js.key_value("noetl_catalog")
    try:
        text = bytes((await catalog.get(state.playbook_key)).value or b"").decode()
    except KeyNotFoundError:
        raise RestartRefused(f"the playbook of execution {execution_id} is no longer in "
                             "noetl_catalog") from None
    playbook = parse_playbook(text, state.playbook_key, kinds=installed_kinds()).playbook
    reason = refusal(playbook, state, from_step)
    if reason is not None:
        raise RestartRefused(f"restart refused: {reason}")
    number = state.restarts + 1
    msg_id = ids.event_msg_id(execution_id, REQUESTED, number)
    body = messages.event_body(REQUESTED, execution_id, time.time(),
                               parent_execution_id=state.parent_execution_id, restart=number,
                               from_step=from_step, workload=workload or {},
                               requested_by=requested_by)
    await publish_event(bus, execution_id, REQUESTED, msg_id, body)
    return RestartAsked(execution_id, number, ids.event_msg_id(execution_id, RESTARTED, number),
                        ids.event_msg_id(execution_id, "event.ignored", REQUESTED, number))
