"""Where a PROBE's time goes (bench/probe_trace.py): the hops of each probe from the messages a
tap saw, and the stack's CPU and run-queue wait per probe."""

from __future__ import annotations

import importlib.util
import os
import sys
import time
from pathlib import Path
from types import ModuleType

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
ID = "exe_0001"
OTHER = "exe_0002"


@pytest.fixture(scope="module")
def trace() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_probe_trace", BENCH / "probe_trace.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def _one_step(trace: ModuleType, execution_id: str, t0: float, slow_store_ms: float) -> list[object]:
    """What a tap sees of a (shortened) probe: the command stored, delivered to the worker and
    acked, its outcome stored and delivered to the router through its partition.
    """
    seen = trace.Seen
    ms = 0.001
    return [
        seen(t0 + 1 * ms, "noetl.commands.default.noop", "_INBOX.c1.r1",
             b'{"execution_id": "%s"}' % execution_id.encode()),
        seen(t0 + (1.2 + slow_store_ms) * ms, "_INBOX.c1.r1", "", b"{}"),
        seen(t0 + (1.5 + slow_store_ms) * ms, "noetl.commands.default.noop",
             f"$JS.ACK.NOETL_COMMANDS.w.1.{execution_id}", b'{"execution_id": "%s"}'
             % execution_id.encode()),
        seen(t0 + (2.0 + slow_store_ms) * ms, f"noetl.events.{execution_id}.step.done.s1",
             "_INBOX.w1.r2", b"{}"),
        seen(t0 + (2.3 + slow_store_ms) * ms, "_INBOX.w1.r2", "", b"{}"),
        seen(t0 + (2.4 + slow_store_ms) * ms, f"$JS.ACK.NOETL_COMMANDS.w.1.{execution_id}", "",
             b""),
        seen(t0 + (2.9 + slow_store_ms) * ms, f"noetl.router.7.{execution_id}.step.done.s1",
             "$JS.ACK.NOETL_ROUTER.r7.1", b"{}"),
    ]


def test_each_probe_is_cut_into_hops_named_by_what_the_messages_are(trace: ModuleType) -> None:
    t0 = 100.0
    seen = _one_step(trace, ID, t0, slow_store_ms=0.0)
    probe = trace.Probe(ID, t0, t0 + 0.003)
    hops = trace.probe_hops(seen, [probe])[ID]
    assert list(hops) == [
        "request -> publish noetl.commands.default.noop",
        "publish noetl.commands.default.noop -> stored noetl.commands.default.noop",
        "stored noetl.commands.default.noop -> deliver noetl.commands.default.noop",
        "deliver noetl.commands.default.noop -> publish noetl.events.X.step.done.s1",
        "publish noetl.events.X.step.done.s1 -> stored noetl.events.X.step.done.s1",
        "stored noetl.events.X.step.done.s1 -> ack noetl.commands.default.noop",
        "ack noetl.commands.default.noop -> deliver noetl.router.P.X.step.done.s1",
    ]
    assert hops["publish noetl.commands.default.noop -> stored noetl.commands.default.noop"] == \
        pytest.approx(0.2)
    assert sum(hops.values()) == pytest.approx(2.9)


def test_the_report_names_the_hop_that_grew_in_the_slow_probes(trace: ModuleType) -> None:
    seen, probes = [], []
    for n in range(20):
        execution_id = f"exe_{n:04d}"
        t0 = 10.0 * n
        slow = 40.0 if n == 13 else 0.0  # one probe's command took 40 ms more to be stored
        seen += _one_step(trace, execution_id, t0, slow)
        probes.append(trace.Probe(execution_id, t0, t0 + (3.0 + slow) / 1000))
    # a heartbeat written during the slow probe, and a pull request's expiry
    seen.append(trace.Seen(130.010, "$KV.noetl_runtime.worker.default.vm-1-abc", "_INBOX.h.1",
                           b"{}"))
    seen.append(trace.Seen(130.011, "_INBOX.p.2", "", b"", "408"))
    # the slow probe's request delivered to the server, which acks it with a double ack
    request = b'{"execution_id": "exe_0013"}'
    seen.append(trace.Seen(130.0001, "noetl.requests.execute", "$JS.ACK.NOETL_REQUESTS.s.1.9",
                           request))
    seen.append(trace.Seen(130.0426, "$JS.ACK.NOETL_REQUESTS.s.1.9", "_INBOX.s.3", b""))
    seen.append(trace.Seen(130.0427, "_INBOX.s.3", "", b""))
    report = trace.slow_hops_report(seen, probes)
    slow_part = report.split("slow probe 43.0 ms")[1]
    first = slow_part.splitlines()[1]
    assert "publish noetl.commands.default.noop -> stored noetl.commands.default.noop" in first
    assert "+  40.00" in first
    assert "1 x publish $KV.noetl_runtime.worker.default.vm-1-abc" in slow_part
    assert "1 x pull status 408" in slow_part
    # nats-server's confirmation of the double ack is the probe's own, not another's
    assert "reply" not in report
    hops = trace.probe_hops(seen, probes)["exe_0013"]
    assert hops["ack noetl.requests.execute -> stored ack noetl.requests.execute"] == \
        pytest.approx(0.1)


def test_cost_summary_sets_the_slowest_probes_against_the_middle_half(trace: ModuleType) -> None:
    latencies = [float(v) for v in range(10, 30)]  # 20 probes
    costs = [trace.ProbeCost(cpu_ms=5.0, wait_ms=1.0) for _ in latencies]
    costs[-1] = trace.ProbeCost(cpu_ms=6.0, wait_ms=30.0)  # the slowest waited for a CPU
    summary = trace.cost_summary(latencies, costs)
    assert summary == {"median_probe_cpu_ms": 5.0, "median_probe_wait_ms": 1.0,
                       "slow_probe_cpu_ms": 6.0, "slow_probe_wait_ms": 30.0}


def test_schedstat_counts_the_cpu_a_process_spent(trace: ModuleType) -> None:
    if not Path(f"/proc/{os.getpid()}/task").is_dir():
        pytest.fail("this test reads /proc (Linux)")
    before = trace.schedstat_ns([os.getpid()])
    end = time.thread_time() + 0.05
    while time.thread_time() < end:  # 50 ms of CPU
        pass
    cost = trace.cost_between(before, trace.schedstat_ns([os.getpid()]))
    assert cost.cpu_ms >= 45
    assert cost.wait_ms >= 0
    assert trace.schedstat_ns([2 ** 22 + 7]) == {}  # no such process


def test_a_process_that_ended_during_a_probe_is_left_out(trace: ModuleType) -> None:
    before = {10: (5_000_000, 1_000_000), 11: (90_000_000, 40_000_000)}
    after = {10: (7_000_000, 1_500_000)}  # 11, a python child, ended
    assert trace.cost_between(before, after) == trace.ProbeCost(cpu_ms=2.0, wait_ms=0.5)
