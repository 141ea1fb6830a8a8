"""An execution's marking after each event it applied (the web UI's timeline scrubber,
`GET /api/executions/{id}/marking`), from the same rebuild `verify` uses (server/replay.py).

Each frame names the event applied, the execution's status after it, every step's status, the
steps with a run in flight (where the tokens are) and the joins waiting with the steps that have
arrived. Results are left out: a frame says where the execution was, not what it computed.
"""

from __future__ import annotations

from nats.js.errors import KeyNotFoundError

from noetl_stream.bus.connection import Bus
from noetl_stream.dsl import parse_playbook
from noetl_stream.dsl.models import Playbook
from noetl_stream.jsonutil import JsonObject, JsonValue
from noetl_stream.messages import execution_id_problem
from noetl_stream.router.state import ExecutionState
from noetl_stream.server.replay import rebuild
from noetl_stream.server.verify import committed_state, first_version, read_log
from noetl_stream.server.versions import named_versions, readable_versions
from noetl_stream.state.results import ResultStore
from noetl_stream.state.step_results import StepResults
from noetl_stream.tools.registry import installed_kinds

MAX_FRAMES = 5000  # an execution with more events shows its first frames and says so


def frame(index: int, event: JsonObject, state: ExecutionState) -> JsonObject:
    step = event.get("step")
    return {"index": index, "event_type": event.get("event_type"),
            "step": step if isinstance(step, str) else None,
            "timestamp": event.get("timestamp"), "status": state.status,
            "steps": {name: rec.status for name, rec in state.steps.items()},
            "running": [*sorted({run.step for run in state.active_runs})],
            "joins": {name: [*sorted(join.arrived)] for name, join in state.joins.items()}}


async def marking_history(bus: Bus, execution_id: str) -> JsonObject | None:
    """{"frames": [...], "truncated": bool}; None for an execution without a committed state."""
    state = None if execution_id_problem(execution_id) else \
        await committed_state(bus, execution_id, StepResults(bus.js, ResultStore(bus.js)))
    if state is None:
        return None
    events = await read_log(bus, execution_id)
    catalog = await bus.js.key_value("noetl_catalog")

    async def load(key: str) -> Playbook:
        text = bytes((await catalog.get(key)).value or b"").decode()
        return parse_playbook(text, key, kinds=installed_kinds()).playbook

    first = first_version(events, state.playbook_key)
    try:
        playbook = await load(first)
    except KeyNotFoundError:
        return None
    versions = await readable_versions(named_versions((None, e) for e in events), load)
    frames: list[JsonValue] = []

    def observe(event: JsonObject, now: ExecutionState) -> None:
        if len(frames) < MAX_FRAMES:
            frames.append(frame(len(frames), event, now))

    rebuild(playbook, events, bus.topology, playbook_key=first, parent_iter=state.parent_iter,
            applied=state.applied, versions=versions, observe=observe)
    return {"execution_id": execution_id, "frames": frames,
            "truncated": len(frames) >= MAX_FRAMES}
