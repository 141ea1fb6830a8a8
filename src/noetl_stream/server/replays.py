"""Replaying an execution as a new one (`noetl-stream replay`, `POST .../replay`).

Asking reads the original's committed state and its playbook, computes the seed (the steps kept
with their results and the steps that run first, router/replay.py), publishes an execution
request for a new id with the original's playbook text, its workload with the patch merged over
it, and the seed; then records `execution.replayed` in the original's log, which its router
applies (the original's state lists its replays). The request goes first: a link never names an
execution that was not asked for. Both publishes carry deterministic msg ids, so asking again
with the same new id stores each once.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

from noetl_stream import ids, messages, router
from noetl_stream.bus.connection import Bus
from noetl_stream.bus.publish import publish_event
from noetl_stream.dsl.layering import merge
from noetl_stream.errors import ReplayRefused
from noetl_stream.jsonutil import JsonObject
from noetl_stream.messages import ExecutionRequest, ReplaySeed
from noetl_stream.router.links import REPLAYED
from noetl_stream.router.replay import seed_of
from noetl_stream.router.state import ExecutionState
from noetl_stream.server.execution_ids import new_execution_id
from noetl_stream.server.restart import recorded_run


def start_of(request: ExecutionRequest) -> Callable[..., ExecutionState]:
    """How the server starts the execution a request asks for: a replay from its seed."""
    if request.replay is None:
        return router.start
    return partial(router.start_replay, seed=request.replay.model_dump(mode="json"))


@dataclass(frozen=True)
class ReplayAsked:
    execution_id: str  # the new execution
    replay_of: str
    seed: ReplaySeed

    def as_json(self) -> JsonObject:
        return {"execution_id": self.execution_id, "replay_of": self.replay_of,
                "from_step": self.seed.from_step, "roots": [*self.seed.roots],
                "kept": [*sorted(self.seed.steps)]}


async def request_replay(bus: Bus, original_id: str, *, from_step: str | None = None,
                         workload: JsonObject | None = None,
                         requested_by: str | None = None,
                         execution_id: str | None = None) -> ReplayAsked:
    """Start a replay of `original_id`; ReplayRefused (unknown or not replayable) says why."""
    original, text, playbook = await recorded_run(bus, original_id, ReplayRefused)
    try:
        seed = ReplaySeed.model_validate(seed_of(playbook, original, from_step))
    except ValueError as exc:
        raise ReplayRefused(f"replay refused: {exc}") from None
    new_id = execution_id or new_execution_id()
    request = ExecutionRequest(execution_id=new_id, playbook=text,
                               playbook_file=original.playbook_path or original.playbook_key,
                               payload=merge(original.workload, workload or {}), replay=seed,
                               labels=dict(original.labels))  # found with the original
    await bus.stored.publish(bus.topology.execute_request_subject(),
                             request.model_dump_json().encode(),
                             {"Nats-Msg-Id": ids.request_msg_id(new_id)})
    msg_id = ids.event_msg_id(original_id, REPLAYED, new_id)
    body = messages.event_body(REPLAYED, original_id, time.time(),
                               parent_execution_id=original.parent_execution_id,
                               replay_execution_id=new_id, from_step=from_step,
                               requested_by=requested_by)
    await publish_event(bus, original_id, REPLAYED, msg_id, body)
    return ReplayAsked(new_id, original_id, seed)
