"""Starting one execution for a trigger: the playbook from the catalog, the payload rendered in
the trigger's context, the request published under an id derived from what fired (so a second
start of the same fire is the same request), then `<name>.last` and the `fired` event.

Shared by the server's trigger service (fires, messages, events) and the API (webhooks).
"""

from __future__ import annotations

from collections.abc import Mapping

from noetl_stream import jsonutil
from noetl_stream.bus.connection import Bus
from noetl_stream.dsl.templating import render_own
from noetl_stream.errors import NoetlStreamError
from noetl_stream.jsonutil import JsonObject
from noetl_stream.messages import MAX_LABELS
from noetl_stream.server.submission import submit
from noetl_stream.server.trigger_ops import publish_trigger_event
from noetl_stream.state import triggers as store
from noetl_stream.state.catalog import read_path
from noetl_stream.state.triggers import LastFire, TriggerRecord


async def request_execution(bus: Bus, record: TriggerRecord, execution_id: str,
                            context: Mapping[str, object], base: JsonObject | None = None
                            ) -> str | None:
    """Publish the execution request; the reason when none can be made (the playbook is not
    registered, a template fails). `base` is merged under the rendered payload.
    """
    spec = record.trigger.spec
    found = await read_path(bus.js, spec.playbook, spec.version)
    if found is None:
        return (f"no playbook is registered under {spec.playbook}"
                + (f" version {spec.version}" if spec.version else ""))
    try:
        payload = render_own(spec.payload, context, field="payload")
    except NoetlStreamError as exc:
        return f"payload: {exc}"
    if spec.payload_from is not None:
        found_base = _lookup(context, spec.payload_from)
        if not isinstance(found_base, dict):
            return f"payload_from: {spec.payload_from} is not a mapping"
        base = found_base
    await submit(bus, playbook_text=found[0], playbook_file=f"catalog:{spec.playbook}",
                 payload={**(base or {}), **jsonutil.to_plain(payload)}, execution_id=execution_id,
                 concurrency=spec.concurrency.model_dump() if spec.concurrency else None,
                 labels=trigger_labels(record))
    return None


def trigger_labels(record: TriggerRecord) -> dict[str, str]:
    """The labels of what the trigger starts: `trigger: <name>`, so `executions list --label
    trigger=NAME` finds them, under the trigger's own `spec.labels` (which may set `trigger`
    themselves; with the most labels a request takes, they are kept as they are).
    """
    labels = dict(record.trigger.spec.labels)
    if len(labels) < MAX_LABELS:
        labels = {"trigger": record.trigger.name, **labels}
    return labels


def _lookup(context: Mapping[str, object], path: str) -> object:
    """The value at a dotted `path` of the trigger's context (None where it has none)."""
    value: object = context
    for key in path.split("."):
        value = value.get(key) if isinstance(value, dict) else None
    return value


async def record_fired(bus: Bus, name: str, last: LastFire) -> None:
    """What a fire started, after its request is stored: `<name>.last`, then the event."""
    await store.write_last(bus.js, name, last)
    await publish_trigger_event(bus, name, "fired", f"trg:{name}:fired:{last.execution_id}",
                                **last.model_dump())
