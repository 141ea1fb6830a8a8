"""Pure parts of observability: captured output bounds, tracing off by default, traceparent
parsing, the log formatter, the live-process series."""

from __future__ import annotations

import json
import logging

import pytest

from noetl_stream.dsl.task_list import TaskList
from noetl_stream.messages import Command
from noetl_stream.observe import tracing
from noetl_stream.observe.logfmt import JsonFormatter
from noetl_stream.observe.metrics import process_families
from noetl_stream.tools.python_runner import TailBuffer, captured_output
from noetl_stream.worker.pipeline import bounded_output


def test_tail_buffer_keeps_the_last_bytes_and_counts_all() -> None:
    out, err = TailBuffer(limit=10), TailBuffer(limit=10)
    for i in range(100):
        out.write(f"{i:03d}\n")
    err.write("é" * 3)
    captured = captured_output(out, err)
    assert captured["stdout"] == "7\n098\n099\n"  # the last 10 bytes
    assert captured["stdout_bytes"] == 400 and captured["stderr_bytes"] == 6
    assert captured["stderr"] == "ééé" and captured["truncated"] is True


def test_bounded_output_keeps_the_last_tasks_text_within_budget() -> None:
    captured = {name: {"stdout": "x" * 100, "stderr": "", "stdout_bytes": 100, "stderr_bytes": 0,
                       "truncated": False} for name in ("a", "b", "c")}
    kept = bounded_output(captured, budget=250)
    assert list(kept) == ["a", "b", "c"]
    assert kept["a"]["stdout"] == "" and kept["a"]["truncated"] is True
    assert kept["a"]["stdout_bytes"] == 100  # the size is still said
    assert kept["b"]["stdout"] == kept["c"]["stdout"] == "x" * 100


def test_tracing_is_off_without_an_exporter(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(tracing.ENV_OTLP, raising=False)
    monkeypatch.delenv(tracing.ENV_OTLP_TRACES, raising=False)
    monkeypatch.delenv(tracing.ENV_TRACE_FILE, raising=False)
    if tracing.enabled():
        pytest.skip("another test in this process turned tracing on")
    assert tracing.setup("test") is False
    assert tracing.execution_trace("1", {"traceparent": "00-" + "a" * 32 + "-" + "b" * 16 + "-01"}) \
        is None
    assert tracing.command_headers({"trace_id": "a" * 32, "span_id": "b" * 16}) is None
    with tracing.command_span({}, Command(execution_id="e", step="s", step_run_id="e.s.1",
                                          tasks=TaskList([])), "default") as span:
        assert span is None
    with tracing.task_span("t", "python", 1) as span:
        assert span is None
    assert tracing.current_headers() == {}


def test_traceparent_round_trip_and_malformed_headers() -> None:
    header = tracing.format_traceparent(0xABC, 0x12)
    assert header == "00-00000000000000000000000000000abc-0000000000000012-01"
    parsed = tracing.parse_traceparent(header)
    assert parsed is not None and (parsed.trace_id, parsed.span_id) == (0xABC, 0x12)
    for bad in (None, "", "00-xyz-12-01", "00-" + "0" * 32 + "-" + "1" * 16 + "-01"):
        assert tracing.parse_traceparent(bad) is None


def test_json_log_lines_carry_time_level_logger_message_and_extras() -> None:
    record = logging.LogRecord("noetl_stream.worker", logging.WARNING, __file__, 1,
                               "command %s failed", ("c1",), None)
    record.execution_id = "42"
    line = json.loads(JsonFormatter().format(record))
    assert line["level"] == "WARNING" and line["logger"] == "noetl_stream.worker"
    assert line["message"] == "command c1 failed" and line["execution_id"] == "42"
    assert line["time"].endswith("Z")


def test_live_process_series_reads_zero_for_a_pool_without_workers() -> None:
    families = process_families([{"role": "worker", "pool": "a", "instance": "w1",
                                   "heartbeat_at": 10.0, "running": 2}], pools=["a", "b"], now=12.0)
    processes = {tuple(s.labels.values()): s.value for s in families[0].samples}
    assert processes == {("worker", "a"): 1, ("worker", "b"): 0}
    assert [s.value for s in families[1].samples] == [2.0]


def test_a_heartbeat_without_numbers_reads_as_fresh_and_idle() -> None:
    families = process_families([{"role": "worker", "pool": "a", "instance": "w1",
                                  "heartbeat_at": [10.0], "running": {"n": 2}}], pools=["a"], now=12.0)
    assert [s.value for s in families[1].samples] == [0.0]
    assert [s.value for s in families[2].samples] == [0.0]
