"""Prometheus metrics through `prometheus_client`.

Two kinds:
- Counted as things happen, in the process that sees them (the default registry, which also holds
  the process collector's `process_*` series): executions started and ended by the server,
  steps (commands) finished and their durations by the worker that ran them, redeliveries a
  worker took. Scrape every server and worker; Prometheus sums across them.
- Read from JetStream and KV at scrape time by a server (`cluster_metrics`): executions by status,
  consumer lag per consumer and pending commands per pool, stream sizes, live processes.

The counting side costs a dictionary lookup and an addition per step; nothing is sent anywhere.
"""

from __future__ import annotations

import time
from collections import Counter as Tally
from collections.abc import Iterable, Mapping

from prometheus_client import (
    REGISTRY,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
    generate_latest,
)
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from noetl_stream.jsonutil import JsonObject, JsonValue
from noetl_stream.messages import Command

# `*_created` series double the output and no dashboard reads them.
disable_created_metrics()  # type: ignore[no-untyped-call]

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
STEP_BUCKETS_S = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)
EXECUTION_BUCKETS_S = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0)
WORKER_CONSUMER_PREFIX = "noetl-workers-"
UNKNOWN = "-"  # label value when a message does not say (an older command without `playbook`)

EXECUTIONS_STARTED = Counter("noetl_executions_started", "Executions this server started, by "
                             "playbook (metadata.path, else name).", ["playbook"])
EXECUTIONS_ENDED = Counter("noetl_executions_ended", "Executions this server saw end, by playbook "
                           "and status (completed, failed, cancelled).", ["playbook", "status"])
EXECUTION_SECONDS = Histogram("noetl_execution_duration_seconds", "From execution.started to its "
                              "end, by playbook and status.", ["playbook", "status"],
                              buckets=EXECUTION_BUCKETS_S)
STEPS = Counter("noetl_steps", "Commands (step runs and loop iterations) this worker finished, by "
                "playbook, step tool kind, pool and status (ok, error).",
                ["playbook", "kind", "pool", "status"])
STEP_SECONDS = Histogram("noetl_step_duration_seconds", "How long this worker ran each command, "
                         "by playbook, tool kind, pool and status.",
                         ["playbook", "kind", "pool", "status"], buckets=STEP_BUCKETS_S)
REDELIVERIES = Counter("noetl_worker_redeliveries", "Commands this worker took that had been "
                       "delivered before (their earlier worker died or stalled), by pool.", ["pool"])
COMMIT_CONFLICTS = Counter("noetl_state_commit_conflicts", "Commits of an execution's state this "
                           "server found moved by another server (revision check): it reloaded "
                           "the state and applied its events again.")
EVENTS_COPIED_AGAIN = Counter("noetl_events_copied_again", "Events NOETL_ROUTER copied again "
                              "(after a nats-server restart) that this server found applied "
                              "already and acknowledged unapplied (server/source_copies.py).")
STORAGE_REFUSALS = Counter("noetl_storage_refusals", "Writes JetStream refused for lack of room "
                           "(a full store, an account or stream at its byte bound) that this "
                           "process held and made again (bus/storage.py).")
RUNNING = Gauge("noetl_worker_running", "Commands this worker is running now, by pool.", ["pool"])


def label(value: object) -> str:
    return str(value) if value else UNKNOWN


def command_kind(command: Command) -> str:
    """The tool kind of a command: its single task's kind, else `pipeline` (as its subject)."""
    tasks = command.tasks.wire
    return label(tasks[0].get("kind")) if len(tasks) == 1 else "pipeline"


_step_series: dict[tuple[str, str, str, str], tuple[Counter, Histogram]] = {}


def observe_step(command: Command, pool: str, ok: bool, seconds: float) -> None:
    labels = (label(command.playbook), command_kind(command), pool, "ok" if ok else "error")
    series = _step_series.get(labels)
    if series is None:  # `labels()` takes a lock and builds a key: done once per label set
        series = _step_series[labels] = (STEPS.labels(*labels), STEP_SECONDS.labels(*labels))
    series[0].inc()
    series[1].observe(seconds)


def observe_outbox(events: Iterable[tuple[str, Mapping[str, JsonValue]]],
                   playbook: str | None) -> None:
    """Count execution starts and ends among the events a server published."""
    for event_type, body in events:
        if event_type == "execution.started":
            EXECUTIONS_STARTED.labels(label(playbook)).inc()
        elif event_type in ("execution.completed", "execution.failed", "execution.cancelled"):
            status = event_type.rsplit(".", 1)[1]
            EXECUTIONS_ENDED.labels(label(playbook), status).inc()
            duration_ms = body.get("duration_ms")
            if isinstance(duration_ms, (int, float)):
                EXECUTION_SECONDS.labels(label(playbook), status).observe(duration_ms / 1000.0)


def process_text() -> bytes:
    """The process's own series: counters, histograms, gauges and `process_*`."""
    return bytes(generate_latest(REGISTRY))


class _Families(Collector):
    """Families computed at scrape time, served through a registry of their own."""

    def __init__(self, families: list[GaugeMetricFamily]) -> None:
        self.families = families

    def collect(self) -> Iterable[GaugeMetricFamily]:
        return iter(self.families)


def render(families: list[GaugeMetricFamily]) -> bytes:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Families(families))
    return bytes(generate_latest(registry))


def gauge(name: str, doc: str, labels: list[str],
          samples: Iterable[tuple[list[str], float]]) -> GaugeMetricFamily:
    family = GaugeMetricFamily(name, doc, labels=labels)
    for values, value in samples:
        family.add_metric(values, value)
    return family


def pool_of_consumer(name: str) -> str | None:
    return name[len(WORKER_CONSUMER_PREFIX):] if name.startswith(WORKER_CONSUMER_PREFIX) else None


def process_families(processes: list[JsonObject], pools: Iterable[str],
                     now: float | None = None) -> list[GaugeMetricFamily]:
    """Live processes by role and pool (0 for a pool with a consumer and no live worker, so the
    series reads 0 instead of vanishing), and each worker's heartbeat age and running commands.
    """
    now = time.time() if now is None else now
    counts: Tally[tuple[str, str]] = Tally({("worker", pool): 0 for pool in pools})
    counts.update((str(p.get("role", "")), str(p.get("pool", ""))) for p in processes)
    workers = [p for p in processes if p.get("role") == "worker"]
    return [
        gauge("noetl_processes", "Live processes (heartbeat entries in KV noetl_runtime) by role "
              "and pool; 0 for a pool whose consumer exists but no worker is alive.",
              ["role", "pool"], [([r, pool], n) for (r, pool), n in sorted(counts.items())]),
        gauge("noetl_worker_heartbeat_age_seconds", "Seconds since each worker's last heartbeat "
              "(written every 10 s; the entry expires after 60 s).", ["pool", "worker"],
              [([str(w.get("pool")), str(w.get("instance"))],
                round(max(0.0, now - _number(w.get("heartbeat_at"), now)), 3)) for w in workers]),
        gauge("noetl_worker_running_commands", "Commands each worker is running (its heartbeat).",
              ["pool", "worker"],
              [([str(w.get("pool")), str(w.get("instance"))], int(_number(w.get("running"), 0)))
               for w in workers]),
    ]


def _number(value: JsonValue, missing: float) -> float:
    """A number a heartbeat holds (written by any release): `missing` when it holds none."""
    if isinstance(value, (int, float, str)) and value:
        return float(value)
    return missing
