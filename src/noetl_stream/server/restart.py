"""Asking for a restart: checks the committed state, then publishes `execution.restart.requested`
in the execution's log, where the router applies it like any event (router/restart.py).

The event's msg id carries the restart's number (the state's count plus one), so asking twice
for the same restart (a double click, a retried call) publishes it once. The router checks again
when it applies it: a restart this check let through but the state no longer allows (it changed
meanwhile) is answered with `event.ignored` and changes nothing.

With `latest`, the restart names the newest registration of the execution's catalog path
(`metadata.path`), checked first against the state: every step the execution has a record of,
and the step named by `from`, must be in it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from nats.js.errors import KeyNotFoundError

from noetl_stream import ids, messages
from noetl_stream.bus.connection import Bus
from noetl_stream.bus.publish import publish_event
from noetl_stream.dsl import parse_playbook
from noetl_stream.dsl.models import Playbook
from noetl_stream.errors import RestartRefused
from noetl_stream.jsonutil import JsonObject
from noetl_stream.router.restart import REQUESTED, RESTARTED, refusal
from noetl_stream.router.state import ExecutionState
from noetl_stream.server.verify import committed_state
from noetl_stream.state.catalog import read_path
from noetl_stream.state.results import ResultStore
from noetl_stream.state.step_results import StepResults
from noetl_stream.tools.registry import installed_kinds


@dataclass(frozen=True)
class RestartAsked:
    execution_id: str
    restart: int  # its number: the router's `execution.restarted` carries it
    restarted_id: str  # msg id of the `execution.restarted` that says it was applied
    ignored_id: str  # msg id of the `event.ignored` that says it was refused

    def as_json(self) -> JsonObject:
        return {"execution_id": self.execution_id, "restart": self.restart}


async def request_restart(bus: Bus, execution_id: str, *, from_step: str | None = None,
                          workload: JsonObject | None = None,
                          requested_by: str | None = None, latest: bool = False) -> RestartAsked:
    state, _, playbook = await recorded_run(bus, execution_id, RestartRefused)
    version = await latest_version(bus, state) if latest else None
    reason = refusal(version[1] if version else playbook, state, from_step)
    if reason is not None:
        shown = f" (the latest version of {state.playbook_path}, {version[0]})" if version else ""
        raise RestartRefused(f"restart refused: {reason}{shown}")
    number = state.restarts + 1
    msg_id = ids.event_msg_id(execution_id, REQUESTED, number)
    body = messages.event_body(REQUESTED, execution_id, time.time(),
                               parent_execution_id=state.parent_execution_id, restart=number,
                               from_step=from_step, workload=workload or {},
                               requested_by=requested_by,
                               **({"playbook_key": version[0]} if version else {}))
    await publish_event(bus, execution_id, REQUESTED, msg_id, body)
    return RestartAsked(execution_id, number, ids.event_msg_id(execution_id, RESTARTED, number),
                        ids.event_msg_id(execution_id, "event.ignored", REQUESTED, number))


async def recorded_run(bus: Bus, execution_id: str, refused: type[RestartRefused]
                       ) -> tuple[ExecutionState, str, Playbook]:
    """An execution's committed state, its playbook's text and that text parsed, as a restart or
    a replay starts from; `refused` (RestartRefused or ReplayRefused) says why there is none.
    """
    state = None if messages.execution_id_problem(execution_id) else \
        await committed_state(bus, execution_id, StepResults(bus.js, ResultStore(bus.js)))
    if state is None:
        raise refused(f"no execution {execution_id} is known", unknown=True)
    catalog = await bus.js.key_value("noetl_catalog")
    try:
        text = bytes((await catalog.get(state.playbook_key)).value or b"").decode()
    except KeyNotFoundError:
        raise refused(f"the playbook of execution {execution_id} is no longer in "
                      "noetl_catalog") from None
    return state, text, parse_playbook(text, state.playbook_key, kinds=installed_kinds()).playbook


async def latest_version(bus: Bus, state: ExecutionState) -> tuple[str, Playbook]:
    """(key, playbook) of the newest registration of the execution's catalog path."""
    if not state.playbook_path:
        raise RestartRefused(f"restart --latest refused: execution {state.execution_id}'s "
                             "playbook has no metadata.path, so it has no registered versions")
    found = await read_path(bus.js, state.playbook_path)
    if found is None:
        raise RestartRefused(f"restart --latest refused: {state.playbook_path} is not registered "
                             "in the catalog (noetl-stream register FILE)")
    text, key = found
    return key, parse_playbook(text, key, kinds=installed_kinds()).playbook
