"""An execution's marking after each event it applied (the web UI's timeline scrubber,
`GET /api/executions/{id}/marking`), from the same rebuild `verify` uses (server/replay.py).

Each frame names the event applied, the execution's status after it, every step's status, the
steps with a run in flight (where the tokens are) and the joins waiting with the steps that have
arrived. Results are left out: a frame says where the execution was, not what it computed.
"""

from __future__ import annotations

from noetl_stream.bus.connection import Bus
from noetl_stream.jsonutil import JsonObject, JsonValue
from noetl_stream.router.state import ExecutionState
from noetl_stream.server.replay import rebuild
from noetl_stream.server.verify import recorded_history
from noetl_stream.state.results import ResultStore
from noetl_stream.state.step_results import StepResults

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
    history = await recorded_history(bus, execution_id, StepResults(bus.js, ResultStore(bus.js)))
    if history is None or history.playbook is None:
        return None
    state = history.state
    frames: list[JsonValue] = []

    def observe(event: JsonObject, now: ExecutionState) -> None:
        if len(frames) < MAX_FRAMES:
            frames.append(frame(len(frames), event, now))

    rebuild(history.playbook, history.events, bus.topology, playbook_key=history.first,
            parent_iter=state.parent_iter, applied=state.applied, versions=history.versions,
            observe=observe)
    return {"execution_id": execution_id, "frames": frames,
            "truncated": len(frames) >= MAX_FRAMES}
