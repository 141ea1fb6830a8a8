"""Reading what `noetl-stream replay-check` compares: each execution's committed state (the
version it ran, `parent_iter`), its log and the versions its restarts named; then the pure
comparison (server/shadow.py). `recent` finds the latest executions of a playbook.
"""

from __future__ import annotations

from nats.js.errors import KeyNotFoundError

from noetl_stream import jsonutil
from noetl_stream.bus.connection import Bus
from noetl_stream.dsl import parse_playbook
from noetl_stream.dsl.models import Playbook
from noetl_stream.messages import execution_id_problem
from noetl_stream.server.retention import EXECUTIONS_BUCKET
from noetl_stream.server.shadow import ShadowReport, shadow
from noetl_stream.server.verify import committed_state, first_version, read_log
from noetl_stream.server.versions import named_versions, readable_versions
from noetl_stream.state.kv_keys import bucket_keys
from noetl_stream.state.results import ResultStore
from noetl_stream.state.step_results import StepResults
from noetl_stream.tools.registry import installed_kinds


async def check_execution(bus: Bus, execution_id: str, candidate: Playbook) -> ShadowReport:
    results = StepResults(bus.js, ResultStore(bus.js))
    state = None if execution_id_problem(execution_id) else \
        await committed_state(bus, execution_id, results)
    if state is None:
        return ShadowReport(execution_id, 0, [f"no committed state of execution {execution_id}"])
    events = await read_log(bus, execution_id)
    catalog = await bus.js.key_value("noetl_catalog")

    async def load(key: str) -> Playbook:
        text = bytes((await catalog.get(key)).value or b"").decode()
        return parse_playbook(text, key, kinds=installed_kinds()).playbook

    first = first_version(events, state.playbook_key)
    try:
        recorded = await load(first)
    except KeyNotFoundError:
        return ShadowReport(execution_id, 0, [f"its playbook {first} is no longer in noetl_catalog"])
    versions = await readable_versions(named_versions((None, e) for e in events), load)
    return shadow(recorded, candidate, events, bus.topology, execution_id=execution_id,
                  playbook_key=first, parent_iter=state.parent_iter, versions=versions)


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
