"""What `noetl-stream trigger show NAME` prints: one trigger as the API's detail has it (state,
source, playbook, next fire times, last execution) and its latest events, oldest first.
"""

from __future__ import annotations

from noetl_stream import jsonutil
from noetl_stream.jsonutil import JsonObject

# What each event type says beyond its type, in this order, where it has the field.
_DETAILS = ("execution_id", "nominal_time", "message", "next_fire", "from_time", "to_time", "count",
            "state", "revision", "reason")


def _field(name: str, value: object) -> str:
    return f"{name} {value if isinstance(value, str | int) else jsonutil.dumps_str(value)}"


def event_line(event: JsonObject) -> str:
    """`TIME  TYPE  field value, ...` for one of the trigger's events."""
    kind = str(event.get("event_type", "")).removeprefix("trigger.")
    details = ", ".join(_field(k, event[k]) for k in _DETAILS if event.get(k) is not None)
    return f"  {event.get('time', '-')}  {kind:<18} {details}".rstrip()


def show_lines(detail: JsonObject, events: list[JsonObject]) -> list[str]:
    """The trigger, then `events` (its latest, oldest first)."""
    last = detail.get("last_execution")
    rows = [("state", detail.get("state")), ("source", detail.get("source")),
            ("playbook", detail.get("playbook")), ("applied at", detail.get("applied_at")),
            ("next fire", detail.get("next_fire") or "-")]
    upcoming = detail.get("next_fires")
    if isinstance(upcoming, list) and len(upcoming) > 1:
        rows.append(("then", ", ".join(str(t) for t in upcoming[1:])))
    if isinstance(last, dict):
        status = last.get("status") or "not started yet"
        rows.append(("last execution", f"{last.get('execution_id')} ({status}), fired at "
                                        f"{last.get('fired_at')}"))
    else:
        rows.append(("last execution", "-"))
    lines = [f"trigger {detail.get('name')}"]
    lines += [f"  {label:<15} {value}" for label, value in rows]
    lines.append(f"events (the latest {len(events)}, oldest first):" if events else "events: none")
    lines += [event_line(e) for e in events]
    return lines
