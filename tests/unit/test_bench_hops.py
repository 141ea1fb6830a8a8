"""The store-latency tap of `make bench` (bench/hops.py): which write is stored where, and how
long its ack took, read from the raw NATS protocol."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

BENCH = Path(__file__).resolve().parents[2] / "bench"


def _hops() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_hops", BENCH / "hops.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclass looks its own module up while defined
    spec.loader.exec_module(module)
    return module


def test_each_published_subject_is_placed_in_its_stream() -> None:
    stream_of = _hops().stream_of
    assert stream_of("noetl.events.e1.step.done.default") == "NOETL_EVENTS"
    assert stream_of("acme.commands.default.noop") == "NOETL_COMMANDS"
    assert stream_of("noetl.requests.execute") == "NOETL_REQUESTS"
    assert stream_of("$KV.noetl_executions.e1") == "KV_noetl_executions"
    assert stream_of("_INBOX.abc.7") is None
    assert stream_of("$JS.API.STREAM.INFO.X") is None
    assert stream_of("noetl.dlq.x") is None


def test_a_store_is_timed_from_its_publish_to_its_ack_and_deliveries_are_not() -> None:
    times = _hops().StoreTimes()
    times.seen(1.000, "noetl.events.e1.task.started", "_INBOX.p.1")
    times.seen(1.001, "noetl.events.e1.task.started", "$JS.ACK.NOETL_EVENTS.c.1.5.5.0.0")
    times.seen(1.0025, "_INBOX.p.1", "")
    times.seen(1.003, "_INBOX.p.1", "")  # a second answer to the same inbox counts once
    times.seen(1.004, "$KV.noetl_executions.e1", "_INBOX.p.2")  # never answered
    report = times.report()
    assert report["NOETL_EVENTS"] == {"count": 1, "p50_ms": 2.5, "p90_ms": 2.5, "sum_ms": 2.5}
    assert set(report) == {"NOETL_EVENTS", "all"}


def test_messages_are_read_whole_across_reads() -> None:
    messages = _hops()._messages
    seen: list[tuple[str, str]] = []
    wire = (b"INFO {}\r\nPONG\r\nMSG a.b 1 _INBOX.x.1 3\r\nabc\r\n"
            b"HMSG c.d 1 12 15\r\nNATS/1.0\r\n\r\nxyz\r\nPING\r\nMSG e.f 1 5\r\nhe")
    rest, pongs, pings = messages(wire, lambda s, r: seen.append((s, r)))
    assert seen == [("a.b", "_INBOX.x.1"), ("c.d", "")]
    assert (pongs, pings) == (1, 1)
    rest, _, _ = messages(rest + b"llo\r\n", lambda s, r: seen.append((s, r)))
    assert seen[-1] == ("e.f", "") and rest == b""
