"""OpenTelemetry traces: one trace per execution, a span per command (a step run or a loop
iteration) and per task call, and child playbooks inside their parent's trace.

Off unless configured: `setup()` installs an SDK tracer provider only when
`OTEL_EXPORTER_OTLP_ENDPOINT` is set (OTLP over HTTP, the SDK reads the other `OTEL_*` variables)
or `NOETL_STREAM_TRACE_FILE` names a file (each finished span as one JSON line; for tests and
debugging). Otherwise every helper here returns at its first line (`_enabled` is False), so the
hot path pays one boolean test per step and task.

How the context travels:
- The server gives each execution a root span context when it starts it, stored in its state
  (`trace`): a top-level execution gets a trace id and span id derived from its execution id; a
  child takes the trace id of the `traceparent` header its request came with (the parent's task
  span), so it sits inside the parent's trace.
- Every command carries `traceparent` (the execution's root span) in its NATS headers; the worker
  opens the command's span under it and each task's span under that; the `playbook` tool sends
  the task span's `traceparent` with the child's request.
- The root span itself is recorded by the server that sees the execution end, with the
  execution's start time and the ids handed out at its start (spans may end in any order).
"""

from __future__ import annotations

import contextlib
import contextvars
import hashlib
import os
import threading
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING

from opentelemetry import trace
from opentelemetry.trace import SpanContext, SpanKind, Status, StatusCode, TraceFlags

from noetl_stream import jsonutil
from noetl_stream.jsonutil import JsonValue
from noetl_stream.messages import Command

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
    from opentelemetry.sdk.trace.export import SpanExporter
    from opentelemetry.sdk.trace.id_generator import IdGenerator

ENV_OTLP = "OTEL_EXPORTER_OTLP_ENDPOINT"
ENV_OTLP_TRACES = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
ENV_TRACE_FILE = "NOETL_STREAM_TRACE_FILE"
HEADER = "traceparent"
TRACER_NAME = "noetl_stream"

_enabled = False
_provider: TracerProvider | None = None
# (trace id, span id) the next span must take: how a root span gets the ids handed out earlier.
_forced: contextvars.ContextVar[tuple[int, int] | None] = contextvars.ContextVar(
    "noetl_forced_ids", default=None)


def enabled() -> bool:
    return _enabled


def setup(service: str) -> bool:
    """Install the SDK provider when an exporter is configured; returns whether tracing is on."""
    global _enabled, _provider
    if _enabled:
        return True
    otlp = os.environ.get(ENV_OTLP) or os.environ.get(ENV_OTLP_TRACES)
    trace_file = os.environ.get(ENV_TRACE_FILE)
    if not otlp and not trace_file:
        return False
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor

    provider = TracerProvider(resource=Resource.create({"service.name": service}),
                              id_generator=_ids())
    if otlp:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    if trace_file:
        provider.add_span_processor(SimpleSpanProcessor(_file_exporter(trace_file)))
    trace.set_tracer_provider(provider)
    _provider = provider
    _enabled = True
    return True


def shutdown() -> None:
    """Flush and stop the exporters (the SDK also does it at exit)."""
    if _provider is not None:
        _provider.shutdown()


def _tracer() -> trace.Tracer:
    return trace.get_tracer(TRACER_NAME)


def _ids() -> IdGenerator:
    from opentelemetry.sdk.trace.id_generator import RandomIdGenerator

    class ForcedIds(RandomIdGenerator):
        def generate_span_id(self) -> int:
            forced = _forced.get()
            return forced[1] if forced else super().generate_span_id()

        def generate_trace_id(self) -> int:
            forced = _forced.get()
            return forced[0] if forced else super().generate_trace_id()

    return ForcedIds()


def _file_exporter(path: str) -> SpanExporter:
    from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

    lock = threading.Lock()

    class JsonLinesExporter(SpanExporter):
        def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
            lines = [jsonutil.dumps_str(_span_record(s)) + "\n" for s in spans]
            with lock, open(path, "a", encoding="utf-8") as out:
                out.writelines(lines)
            return SpanExportResult.SUCCESS

        def shutdown(self) -> None:
            return None

    return JsonLinesExporter()


def _span_record(span: ReadableSpan) -> dict[str, object]:
    context = span.get_span_context()
    parent = span.parent
    return {"name": span.name,
            "trace_id": f"{context.trace_id:032x}" if context is not None else None,
            "span_id": f"{context.span_id:016x}" if context is not None else None,
            "parent_id": f"{parent.span_id:016x}" if parent is not None else None,
            "service": span.resource.attributes.get("service.name"),
            "start_ns": span.start_time, "end_ns": span.end_time,
            "status": span.status.status_code.name, "attributes": dict(span.attributes or {})}


# -- ids and headers ---------------------------------------------------------------------------

def _derived(execution_id: str, purpose: str, bits: int) -> int:
    digest = hashlib.sha256(f"{purpose}\0{execution_id}".encode()).digest()
    return int.from_bytes(digest[: bits // 8], "big") or 1


def parse_traceparent(value: str | None) -> SpanContext | None:
    """`00-<32 hex trace>-<16 hex span>-<2 hex flags>` (W3C), or None when absent or malformed."""
    if not value:
        return None
    parts = value.strip().split("-")
    if len(parts) != 4 or len(parts[1]) != 32 or len(parts[2]) != 16:
        return None
    try:
        trace_id, span_id, flags = int(parts[1], 16), int(parts[2], 16), int(parts[3], 16)
    except ValueError:
        return None
    if not trace_id or not span_id:
        return None
    return SpanContext(trace_id, span_id, is_remote=True, trace_flags=TraceFlags(flags))


def format_traceparent(trace_id: int, span_id: int) -> str:
    return f"00-{trace_id:032x}-{span_id:016x}-01"


def execution_trace(execution_id: str, headers: Mapping[str, str] | None) -> dict[str, str] | None:
    """The root span context of a new execution, as stored in its state: its trace id (the
    parent's, when the request came with a `traceparent`), its span id, its parent span id.
    """
    if not _enabled:
        return None
    parent = parse_traceparent((headers or {}).get(HEADER))
    trace_id = parent.trace_id if parent is not None else _derived(execution_id, "trace", 128)
    return {"trace_id": f"{trace_id:032x}",
            "span_id": f"{_derived(execution_id, 'span', 64):016x}",
            "parent_span_id": f"{parent.span_id:016x}" if parent is not None else ""}


def command_headers(trace_ids: Mapping[str, str] | None) -> dict[str, str] | None:
    """The `traceparent` header commands of an execution carry, or None without a trace."""
    if not _enabled or not trace_ids:
        return None
    return {HEADER: format_traceparent(int(trace_ids["trace_id"], 16),
                                       int(trace_ids["span_id"], 16))}


def record_execution(trace_ids: Mapping[str, str] | None, *, execution_id: str, playbook: str,
                     status: str, started_at: float, ended_at: float) -> None:
    """Record the execution's root span, with the ids its commands already named as parent."""
    if not _enabled or not trace_ids:
        return
    trace_id, span_id = int(trace_ids["trace_id"], 16), int(trace_ids["span_id"], 16)
    parent_id = trace_ids.get("parent_span_id")
    context = None
    if parent_id:
        remote = SpanContext(trace_id, int(parent_id, 16), is_remote=True,
                             trace_flags=TraceFlags(TraceFlags.SAMPLED))
        context = trace.set_span_in_context(trace.NonRecordingSpan(remote))
    token = _forced.set((trace_id, span_id))
    try:
        span = _tracer().start_span(f"execution {playbook}", context=context,
                                    kind=SpanKind.INTERNAL, start_time=int(started_at * 1e9),
                                    attributes={"noetl.execution_id": execution_id,
                                                "noetl.playbook": playbook,
                                                "noetl.status": status})
    finally:
        _forced.reset(token)
    if status != "completed":
        span.set_status(Status(StatusCode.ERROR, status))
    span.end(end_time=int(ended_at * 1e9))


# -- spans around work ---------------------------------------------------------------------------

# What a span helper gives while tracing is off: no span, and no generator made per call.
_NO_SPAN: contextlib.nullcontext[None] = contextlib.nullcontext()


def command_span(headers: Mapping[str, str] | None, command: Command,
                 pool: str) -> contextlib.AbstractContextManager[trace.Span | None]:
    """The span of one command on a worker, under the execution's root span; None when off."""
    return _command_span(headers, command, pool) if _enabled else _NO_SPAN


@contextlib.contextmanager
def _command_span(headers: Mapping[str, str] | None, command: Command,
                  pool: str) -> Iterator[trace.Span | None]:
    parent = parse_traceparent((headers or {}).get(HEADER))
    context = trace.set_span_in_context(trace.NonRecordingSpan(parent)) if parent else None
    iteration = command.iteration
    name = f"step {command.step}" + (f" [{iteration}]" if iteration is not None else "")
    attributes: dict[str, str | int] = {"noetl.execution_id": command.execution_id,
                  "noetl.step": command.step, "noetl.step_run_id": command.step_run_id,
                  "noetl.pool": pool, "noetl.playbook": command.playbook or ""}
    if iteration is not None:
        attributes["noetl.iteration"] = iteration
    with _tracer().start_as_current_span(name, context=context, kind=SpanKind.CONSUMER,
                                         attributes=attributes) as span:
        yield span


def finish(span: trace.Span | None, ok: bool, error: Mapping[str, JsonValue] | None = None) -> None:
    """Mark a span's outcome (no-op for None)."""
    if span is None:
        return
    if not ok:
        message = str((error or {}).get("message") or "failed")
        span.set_status(Status(StatusCode.ERROR, message))


def task_span(task: str, kind: str,
              attempt: int) -> contextlib.AbstractContextManager[trace.Span | None]:
    """The span of one task call, under the current command span; None when off."""
    return _task_span(task, kind, attempt) if _enabled else _NO_SPAN


@contextlib.contextmanager
def _task_span(task: str, kind: str, attempt: int) -> Iterator[trace.Span | None]:
    with _tracer().start_as_current_span(
            f"task {task}", kind=SpanKind.INTERNAL,
            attributes={"noetl.task": task, "noetl.tool.kind": kind,
                        "noetl.attempt": attempt}) as span:
        yield span


def current_headers() -> dict[str, str]:
    """`traceparent` of the current span, for a message this span causes (a child request)."""
    if not _enabled:
        return {}
    context = trace.get_current_span().get_span_context()
    if not context.is_valid:
        return {}
    return {HEADER: format_traceparent(context.trace_id, context.span_id)}
