"""Reading what `noetl-stream replay-check` compares: each execution's committed state (the
version it ran, `parent_iter`), its log and the versions its restarts named; then the pure
comparison (server/shadow.py). `recent` finds the latest executions of a playbook.
"""

from __future__ import annotations

from nats.js.errors import KeyNotFoundError

from noetl_stream import jsonutil
from noetl_stream.bus.connection import Bus
from noetl_stream.dsl.models import Playbook
from noetl_stream.server.retention import EXECUTIONS_BUCKET
from noetl_stream.server.shadow import ShadowReport, shadow
from noetl_stream.server.verify import recorded_history
from noetl_stream.state.kv_keys import bucket_keys
from noetl_stream.state.results import ResultStore
from noetl_stream.state.step_results import StepResults


async def check_execution(bus: Bus, execution_id: str, candidate: Playbook) -> ShadowReport:
    history = await recorded_history(bus, execution_id, StepResults(bus.js, ResultStore(bus.js)))
    if history is None:
        return ShadowReport(execution_id, 0, [f"no committed state of execution {execution_id}"])
    if history.playbook is None:
        return ShadowReport(execution_id, 0,
                            [f"its playbook {history.first} is no longer in noetl_catalog"])
    return shadow(history.playbook, candidate, history.events, bus.topology,
                  execution_id=execution_id, playbook_key=history.first,
                  parent_iter=history.state.parent_iter, versions=history.versions)


async def recent(bus: Bus, candidate: Playbook, count: int) -> list[str]:
    """The `count` latest started executions of the playbook (its metadata.path, else its name)."""
    kv = await bus.js.key_value(EXECUTIONS_BUCKET)
    found: list[tuple[float, str]] = []
    for key in await bucket_keys(bus.js, EXECUTIONS_BUCKET):
        try:
            raw = jsonutil.loads((await kv.get(key)).value or b"{}")
        except KeyNotFoundError:
            continue
        same = raw.get("playbook_path") == candidate.path if candidate.path \
            else raw.get("playbook_name") == candidate.name
        started = raw.get("started_at")
        if same and isinstance(started, (int, float)):
            found.append((float(started), key))
    return [key for _, key in sorted(found, reverse=True)[:count]]
