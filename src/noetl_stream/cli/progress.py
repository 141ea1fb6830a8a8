"""Human-readable live progress on stderr: steps as they start and finish, loops as done/total.

Times come from the events themselves (their `timestamp`), not from when this process reads
them, so following a finished execution shows the durations it really had.
"""

from __future__ import annotations

import os
import sys
import time
from typing import TextIO

from noetl_stream import jsonutil
from noetl_stream.bus.timers import TIMER_FIRED, TIMER_SCHEDULED
from noetl_stream.jsonutil import JsonObject, JsonValue
from noetl_stream.router.watchdog import TIMER_PREFIX as WATCHDOG_PREFIX


def _duration(seconds: float) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{int(seconds // size)}{unit}"
    return f"{seconds:g}s"


def _short(value: JsonValue, limit: int = 120) -> str:
    text = jsonutil.dumps_str(value) if not isinstance(value, str) else value
    return text if len(text) <= limit else text[: limit - 1] + "…"


def output_lines(event: JsonObject) -> list[str]:
    """What the event's tasks printed (`output`, events.py), as `[task stdout] line` lines."""
    lines: list[str] = []
    output = event.get("output")
    if not isinstance(output, dict):
        return lines
    iteration = event.get("iteration")
    for name, captured in output.items():
        task = name if iteration is None else f"{name} #{iteration}"
        if not isinstance(captured, dict):
            continue
        for stream in ("stdout", "stderr"):
            text = str(captured.get(stream) or "")
            size = captured.get(f"{stream}_bytes") or 0
            if isinstance(size, int) and len(text.encode()) < size:
                lines.append(f"[{task} {stream}] … (last {len(text.encode())} of {size} bytes)")
            lines += [f"[{task} {stream}] {line}" for line in text.splitlines()]
    return lines


def _error_field(event: JsonObject, name: str) -> JsonValue:
    """A field of the event's `error` object; "" when it has none."""
    error = event.get("error")
    return error.get(name, "") if isinstance(error, dict) else ""


def _timestamp(event: JsonObject) -> float | None:
    ts = event.get("timestamp")
    return float(ts) if isinstance(ts, (int, float)) and not isinstance(ts, bool) else None


class ProgressPrinter:
    def __init__(self, stream: TextIO = sys.stderr, *, color: bool | None = None,
                 show_output: bool = False) -> None:
        self.out = stream
        self.t0: float | None = None  # the first event's timestamp
        self.now = 0.0  # the timestamp of the event being shown
        # NO_COLOR (https://no-color.org): set to anything non-empty, no escape codes at all.
        self.color = color if color is not None else \
            stream.isatty() and not os.environ.get("NO_COLOR")
        self.show_output = show_output
        self.started: dict[str, float] = {}
        # An `on_limit: skip` request for a slot: it never waits, so nothing is said until it
        # is admitted or skipped.
        self.skip_request: JsonObject | None = None

    def _c(self, code: str, text: str) -> str:
        return f"\033[{code}m{text}\033[0m" if self.color else text

    def _line(self, text: str) -> None:
        elapsed = self.now - self.t0 if self.t0 is not None else 0.0
        try:
            self.out.write(f"{elapsed:7.2f}s  {text}\n")
            self.out.flush()
        except (BrokenPipeError, ValueError):
            self.out = open(os.devnull, "w")  # noqa: SIM115 - the reader left; stop writing

    def __call__(self, event: JsonObject) -> None:
        ts = _timestamp(event)
        if ts is not None and event.get("event_type") != "timer.scheduled":  # its ts is the future
            self.now = max(self.now, ts) if self.t0 is not None else ts
            self.t0 = ts if self.t0 is None else self.t0
        self._show(event)
        if self.show_output:
            for line in output_lines(event):
                self._line(self._c("2", f"  {line}"))

    def _show(self, event: JsonObject) -> None:
        etype = str(event.get("event_type", ""))
        if etype in (TIMER_SCHEDULED, TIMER_FIRED):
            self._timer(etype, event)
        elif etype.startswith("execution."):
            self._execution_line(etype, event)
        elif etype.startswith("loop."):
            self._loop_line(etype, event, str(event.get("step", "")))
        elif etype.startswith("step.") or etype == "task.redelivered":
            self._step_line(etype, event, str(event.get("step", "")))
        elif etype == "retry.started":
            self._retry_line(event, str(event.get("step", "")))
        elif etype in ("concurrency.requested", "sla.missed"):
            self._limit_line(etype, event)

    def _limit_line(self, etype: str, event: JsonObject) -> None:
        """Waiting for a concurrency slot, or past the SLA (docs/triggers.md)."""
        if etype == "concurrency.requested" and event.get("on_limit") == "skip":
            self.skip_request = event
        elif etype == "concurrency.requested":
            self._line(f"waiting for a slot: at most {event.get('limit')} of "
                       f"{event.get('group')} run at once")
        else:
            self._line(self._c("33", "SLA missed") + f"  running {event.get('elapsed_s')}s, "
                       f"max_duration {event.get('max_duration_s'):g}s")

    def _execution_line(self, etype: str, event: JsonObject) -> None:
        if etype == "execution.started":
            self._line(f"execution {event.get('execution_id')} started "
                       f"({event.get('playbook')})")
        elif etype == "execution.completed":
            self._line(self._c("1;32", "completed") + f"  result: {_short(event.get('result'), 400)}")
        elif etype == "execution.failed":
            err = _error_field(event, "message")
            self._line(self._c("1;31", "failed") + f"  {_short(err, 600)}")
        elif etype == "execution.cancelled":
            reason = _error_field(event, "reason") or ""
            # Refused a slot under `on_limit: skip` (the reason names the limit): it never ran.
            skipped = self.skip_request is not None and \
                _error_field(event, "requested_by") == "concurrency"
            self._line(self._c("1;33", "skipped" if skipped else "cancelled")
                       + (f"  {_short(reason, 300)}" if reason else ""))
        elif etype == "execution.admitted":
            self.skip_request = None
            self._line("admitted: it holds a slot")
        elif etype == "execution.rejected":
            self._line(self._c("1;31", "rejected"))
            errors = event.get("errors", [])
            for e in errors if isinstance(errors, list) else []:
                self.out.write(f"  {e}\n")

    def _step_line(self, etype: str, event: JsonObject, step: str) -> None:
        if etype == "step.started":
            self.started[str(event.get("step_run_id"))] = self.now
            run = event.get("run", 1)
            self._line(f"▶ {step}" + (f" (run {run})" if isinstance(run, int) and run > 1 else ""))
        elif etype == "step.done":
            self._line(self._c("32", f"✓ {step}") + f"  {self._took(event)}")
        elif etype == "step.failed":
            err = _error_field(event, "message")
            self._line(self._c("31", f"✗ {step}") + f"  {_short(err, 300)}")
        elif etype == "step.timeout":
            self._line(self._c("31", f"⏱ {step}") + f"  {_short(event.get('reason', ''), 300)}")
        elif etype == "step.cancelled":
            self._line(self._c("33", f"■ {step} cancelled"))
        elif etype == "task.redelivered":
            self._line(self._c("33", f"↻ {step}") + f"  command redelivered "
                       f"(delivery {event.get('delivery')}): its worker stopped answering")
        elif etype == "step.skipped":
            self._line(self._c("2", f"- {step} skipped ({event.get('reason', '')})"))

    def _retry_line(self, event: JsonObject, step: str) -> None:
        """`↻ fetch 2/5 in 4s: HTTP 404`: which attempt comes next, when, and why."""
        raw = event.get("after")
        after: JsonObject = raw if isinstance(raw, dict) else {}
        code = after.get("status_code")
        why = f"HTTP {code}" if isinstance(code, int) else _short(after.get("error") or "", 200)
        of = f"/{event['max_attempts']}" if event.get("max_attempts") else ""
        task = event.get("task")
        # A step's only task is named after it (dsl/parsing/tasks.py): the step says it all.
        where = step if task in (None, f"{step}_task") else f"{step}.{task}"
        delay = event.get("delay_s")
        when = f" in {_duration(round(float(delay), 2))}" if isinstance(delay, (int, float)) else ""
        iteration = event.get("iteration")
        item = f" #{iteration}" if iteration is not None else ""
        self._line(self._c("33", f"↻ {where}{item}") + f" {event.get('attempt')}{of}{when}"
                   + (f": {why}" if why else ""))

    def _loop_line(self, etype: str, event: JsonObject, step: str) -> None:
        if etype == "loop.started":
            if event.get("total") is None:  # a cursor loop: its items are claimed as it goes
                self._line(f"  {step}: cursor loop, {event.get('max_in_flight')} claiming at once")
            else:
                self._line(f"  {step}: loop of {event.get('total')} items")
        elif etype == "loop.progress":
            done, total = event.get("done"), event.get("total")
            mark = "" if event.get("ok", True) else self._c("31", " (an iteration failed)")
            if event.get("exhausted"):
                mark = " (a claim found nothing left)"
            self._line(f"  {step}: {done}/{total}{mark}" if total is not None
                       else f"  {step}: {done} done{mark}")
        elif etype == "loop.done":
            self._line(self._c("32", f"✓ {step}") + f"  loop done  {self._took(event)}")
        elif etype == "loop.failed":
            err = _error_field(event, "message")
            self._line(self._c("31", f"✗ {step}") + f"  loop failed: {_short(err, 300)}")

    def _timer(self, etype: str, event: JsonObject) -> None:
        timer_id = str(event.get("timer_id", ""))
        if timer_id.startswith(WATCHDOG_PREFIX):
            return  # a step's deadline: shown as step.timeout if it is ever reached
        data = event.get("data")
        to = data.get("to") if isinstance(data, dict) else None
        what = f"next {to}" if to else f"timer {timer_id}"
        step = event.get("step", "")
        fire_at, set_at = event.get("fire_at"), event.get("set_at")
        if etype == TIMER_FIRED:
            self._line(f"⏲ {step}: {what} fired")
        elif isinstance(fire_at, (int, float)) and isinstance(set_at, (int, float)):
            at = time.strftime("%H:%M:%S", time.localtime(fire_at))
            self._line(f"⏲ {step}: {what} scheduled, fires in {_duration(fire_at - set_at)} "
                       f"(at {at})")
        else:
            self._line(f"⏲ {step}: {what} scheduled")

    def _took(self, event: JsonObject) -> str:
        ms = event.get("duration_ms")
        if ms is None:
            t = self.started.get(str(event.get("step_run_id")))
            ms = (self.now - t) * 1000 if t is not None else None
        return f"{ms:.0f} ms" if ms is not None else ""
