"""Reading executions for the CLI: their states in KV `noetl_executions`, their events in the
events stream, and one readable line per event (`logs`, `executions list`).
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime

from nats.js.errors import KeyNotFoundError

from noetl_stream import jsonutil
from noetl_stream.api.event_log import count_after, read_page
from noetl_stream.bus.connection import Bus
from noetl_stream.cli.progress import output_lines
from noetl_stream.isotime import iso_time
from noetl_stream.jsonutil import JsonObject, JsonValue
from noetl_stream.router.state import ExecutionState
from noetl_stream.state.kv_keys import bucket_keys
from noetl_stream.state.records import Skips, read_each

EXECUTIONS_BUCKET = "noetl_executions"
PAGE = 500
_SINCE = re.compile(r"(\d+(?:\.\d+)?)([smhd])")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400}


async def load_state(bus: Bus, execution_id: str) -> ExecutionState | None:
    kv = await bus.js.key_value(EXECUTIONS_BUCKET)
    try:
        entry = await kv.get(execution_id)
    except KeyNotFoundError:
        return None
    return ExecutionState.from_dict(jsonutil.loads(entry.value)) if entry.value else None


async def all_states(bus: Bus, skips: Skips) -> list[ExecutionState]:
    """Every execution state (the bucket has no index: each key is read); one that does not
    decode is named in `skips`.
    """
    keys = await bucket_keys(bus.js, EXECUTIONS_BUCKET)
    return await read_each(keys, lambda key: load_state(bus, key), skips)


async def is_known(bus: Bus, execution_id: str) -> bool:
    """Whether anything was recorded for the execution: a state, or any event (a rejected one
    has only its `execution.rejected`).
    """
    if await load_state(bus, execution_id) is not None:
        return True
    return await count_after(bus, execution_id, 0) > 0


async def read_events(bus: Bus, execution_id: str) -> tuple[list[JsonObject], int]:
    """Every event the stream holds for the execution, oldest first, and the last sequence read."""
    events: list[JsonObject] = []
    last = 0
    while True:
        page, last = await read_page(bus, execution_id, after_seq=last, limit=PAGE)
        events += [stored.event for stored in page]
        if len(page) < PAGE:
            return events, last


def parse_since(text: str, now: float) -> float:
    """`--since`: a duration back from now (`90s`, `15m`, `2h`, `7d`) or an ISO-8601 time."""
    match = _SINCE.fullmatch(text.strip())
    if match:
        return now - float(match.group(1)) * _UNIT_S[match.group(2)]
    try:
        parsed = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(f"--since expects a duration like 30m, 2h, 7d or an ISO-8601 time, "
                         f"got {text!r}") from None
    return (parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)).timestamp()


@dataclass(frozen=True)
class ExecutionRow:
    execution_id: str
    status: str
    playbook: str
    started_at: float
    ended_at: float | None
    parent_execution_id: str | None
    waiting: JsonObject | None = None  # running, but waiting for a slot under a concurrency limit

    def as_json(self) -> JsonObject:
        return {"execution_id": self.execution_id, "status": self.status,
                "playbook": self.playbook, "started_at": iso_time(self.started_at),
                "ended_at": iso_time(self.ended_at) if self.ended_at else None,
                "duration_s": self.duration_s(), "parent_execution_id": self.parent_execution_id,
                "waiting": self.waiting}

    def duration_s(self, now: float | None = None) -> float | None:
        """Seconds it ran (so far, for a running one when `now` is given)."""
        end = self.ended_at if self.ended_at is not None else now
        return round(end - self.started_at, 3) if end is not None and self.started_at else None


def row_of(state: ExecutionState) -> ExecutionRow:
    return ExecutionRow(execution_id=state.execution_id, status=state.status,
                        playbook=state.playbook_path or state.playbook_name or "",
                        started_at=state.started_at, ended_at=state.ended_at,
                        parent_execution_id=state.parent_execution_id, waiting=_slot_wait(state))


def _slot_wait(state: ExecutionState) -> JsonObject | None:
    """The group and limit a running execution waits under for a slot, while it does."""
    held = state.admission
    if state.status != "running" or held is None or not held.get("waiting"):
        return None
    return {"group": str(held.get("group", "")), "limit": int(held.get("limit", 0))}


def select(states: Iterable[ExecutionState], *, statuses: tuple[str, ...], playbook: str | None,
           since: float | None, limit: int) -> list[ExecutionRow]:
    """Newest first, filtered: any of `statuses` (`waiting` too), `playbook` in its path or name,
    started since.
    """
    rows = []
    for state in states:
        # `waiting` is a running execution that holds no slot yet; `running` lists it too.
        waiting = "waiting" in statuses and _slot_wait(state) is not None
        if statuses and state.status not in statuses and not waiting:
            continue
        if playbook and playbook not in (state.playbook_path or "") \
                and playbook not in (state.playbook_name or ""):
            continue
        if since is not None and state.started_at < since:
            continue
        rows.append(row_of(state))
    rows.sort(key=lambda r: (r.started_at, r.execution_id), reverse=True)
    return rows[:limit]


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 60:
        return f"{seconds:.2f}s"
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m{secs:02d}s" if hours else f"{minutes}m{secs:02d}s"


def table(rows: list[ExecutionRow], now: float | None = None) -> list[str]:
    """A header row and one row per execution, columns padded to their widest cell."""
    now = time.time() if now is None else now
    cells = [("EXECUTION_ID", "STATUS", "PLAYBOOK", "STARTED (UTC)", "DURATION", "PARENT")]
    for r in rows:
        started = datetime.fromtimestamp(r.started_at, UTC).strftime("%Y-%m-%d %H:%M:%S") \
            if r.started_at else "-"
        shown = _duration(r.duration_s(now))
        # A running execution that holds no slot yet reads as `waiting`, not as one at work.
        cells.append((r.execution_id, "waiting" if r.waiting else r.status, r.playbook or "-", started,
                      shown if r.ended_at is not None or shown == "-" else f"{shown}+",
                      r.parent_execution_id or "-"))
    widths = [max(len(row[i]) for row in cells) for i in range(len(cells[0]))]
    return ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()
            for row in cells]


def _short(value: JsonValue, limit: int = 200) -> str:
    text = value if isinstance(value, str) else jsonutil.dumps_str(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _details(event: JsonObject) -> str:
    """What is worth reading about an event beyond its type and step."""
    etype = str(event.get("event_type", ""))
    parts: list[str] = []
    error = event.get("error")
    if isinstance(event.get("duration_ms"), (int, float)):
        parts.append(f"{event['duration_ms']:.0f} ms")
    parts += _kind_details(etype, event)
    parts.append(_timer_details(event))
    if etype in ("execution.completed", "step.done", "loop.iteration.done") \
            and event.get("result") is not None:
        parts.append(f"result {_short(event.get('result'))}")
    if isinstance(error, dict) and error.get("message"):
        parts.append(f"error: {_short(error['message'], 500)}")
    problems = event.get("errors") or []
    for problem in problems if isinstance(problems, list) else []:
        parts.append(_short(problem, 500))
    return "  ".join(p for p in parts if p)


def _kind_details(etype: str, event: JsonObject) -> list[str]:
    """The fields that matter for this type of event."""
    parts: list[str] = []
    if etype == "execution.started":
        parts.append(str(event.get("path") or event.get("playbook") or ""))
    if etype in ("task.started", "task.redelivered"):
        parts.append(f"pool {event.get('pool')}")
    if etype == "task.redelivered":
        parts.append(f"delivery {event.get('delivery')}")
    if etype == "loop.started":
        parts.append(f"{event.get('total')} items" if event.get("total") is not None
                     else "cursor loop")
    if etype == "loop.progress":
        parts.append(f"{event.get('done')}/{event.get('total', '?')}")
    if etype.startswith(("retry.", "poll.", "sink.")):
        parts.append(f"task {event.get('task')} attempt {event.get('attempt')}")
        if event.get("status"):
            parts.append(str(event["status"]))
    if etype in ("step.skipped", "step.timeout", "step.cancelled", "event.ignored"):
        parts.append(str(event.get("reason") or ""))
    if etype == "child.started":
        parts.append(f"child {event.get('child_execution_id')}")
    if etype == "concurrency.requested":
        parts.append(f"at most {event.get('limit')} of {event.get('group')} run at once "
                     f"(on_limit: {event.get('on_limit')})")
    return parts


def event_lines(event: JsonObject) -> list[str]:
    """One line for the event, then what its tasks printed, indented."""
    when = _when(event)
    where = str(event.get("step") or "")
    if event.get("iteration") is not None:
        where += f"[{event['iteration']}]"
    head = f"{when}  {event.get('event_type', '')}"
    if where:
        head += f"  {where}"
    details = _details(event)
    lines = [f"{head}  {details}" if details else head]
    lines += [f"    {line}" for line in output_lines(event)]
    return lines


def _when(event: JsonObject) -> str:
    """When the event happened. A timer's schedule carries the time it fires as its timestamp:
    it happened when the timer was set (`set_at`).
    """
    ts = event.get("timestamp")
    set_at = event.get("set_at")
    if event.get("event_type") == "timer.scheduled" and isinstance(set_at, (int, float)):
        return iso_time(float(set_at))
    return str(event.get("time") or (iso_time(float(ts)) if isinstance(ts, (int, float)) else "-"))


def _timer_details(event: JsonObject) -> str:
    fire_at = event.get("fire_at")
    if event.get("event_type") == "timer.fired" and event.get("timer_id"):
        return f"timer {event.get('timer_id')}"
    if event.get("event_type") != "timer.scheduled" or not isinstance(fire_at, (int, float)):
        return ""
    return f"timer {event.get('timer_id')} fires at {iso_time(float(fire_at))}"
