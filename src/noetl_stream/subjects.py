"""Every subject, stream, consumer and bucket name in one place, read from `subjects/topology.yaml`.

Pure: no NATS here; `runtime/provision.py` turns this description into streams and buckets.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML

from noetl_stream import config

DEFAULT_PREFIX = "noetl"
DEFAULT_POOL = "default"

# Event types that the worker publishes and the router consumes.
ROUTER_INPUT_EVENTS = ("step.done", "step.failed", "loop.iteration.done", "loop.iteration.failed")
TERMINAL_EXECUTION_EVENTS = ("execution.completed", "execution.failed", "execution.cancelled")


@dataclass(frozen=True)
class StreamDecl:
    name: str
    subjects: tuple[str, ...]
    retention: str
    duplicate_window_s: float
    max_age_s: float
    allow_msg_schedules: bool = False  # durable timers (NATS message schedules)


@dataclass(frozen=True)
class ConsumerDecl:
    stream: str
    durable: str
    filter_subjects: tuple[str, ...]
    ack_wait_s: float
    max_deliver: int
    per_pool: bool = False


@dataclass(frozen=True)
class BucketDecl:
    name: str
    history: int
    ttl_s: float | None = None


@dataclass(frozen=True)
class ObjectStoreDecl:
    name: str
    ttl_s: float | None = None


@dataclass(frozen=True)
class Topology:
    """The declared NATS topology with `{prefix}` already filled in."""

    prefix: str
    streams: tuple[StreamDecl, ...]
    consumers: tuple[ConsumerDecl, ...]
    buckets: tuple[BucketDecl, ...]
    subject_templates: dict[str, str] = field(default_factory=dict)
    object_stores: tuple[ObjectStoreDecl, ...] = ()

    # -- subject builders ------------------------------------------------------------------
    def execute_request_subject(self) -> str:
        return f"{self.prefix}.requests.execute"

    def cancel_request_subject(self) -> str:
        return f"{self.prefix}.requests.cancel"

    def command_subject(self, pool: str, kind: str) -> str:
        return f"{self.prefix}.commands.{pool}.{kind}"

    def command_filter(self, pool: str) -> str:
        return f"{self.prefix}.commands.{pool}.>"

    def event_subject(self, execution_id: str, event_type: str) -> str:
        return f"{self.prefix}.events.{execution_id}.{event_type}"

    def execution_events_filter(self, execution_id: str) -> str:
        return f"{self.prefix}.events.{execution_id}.>"

    def signal_subject(self, execution_id: str, name: str) -> str:
        return f"{self.prefix}.events.{execution_id}.signal.{name}"

    def timer_schedule_subject(self, execution_id: str, timer: str) -> str:
        """Where a timer's schedule message waits; a new one on it replaces the old (a reset)."""
        return f"{self.prefix}.events.{execution_id}.timer.schedule.{timer}"

    def dead_letter_subject(self, subject: str) -> str:
        """`noetl.commands.default.python` -> `noetl.dlq.commands.default.python`."""
        return f"{self.prefix}.dlq.{subject.split('.', 1)[-1]}"

    def dead_letter_filter(self) -> str:
        return f"{self.prefix}.dlq.>"

    def event_type_of(self, subject: str) -> str:
        """`noetl.events.<id>.step.done` -> `step.done`."""
        parts = subject.split(".", 3)
        return parts[3] if len(parts) == 4 else ""

    def consumer(self, durable: str) -> ConsumerDecl:
        for c in self.consumers:
            if c.durable == durable:
                return c
        raise KeyError(durable)

    def pool_consumer(self, pool: str) -> ConsumerDecl:
        for c in self.consumers:
            if c.per_pool:
                return ConsumerDecl(
                    stream=c.stream,
                    durable=c.durable.replace("{pool}", pool),
                    filter_subjects=tuple(s.replace("{pool}", pool) for s in c.filter_subjects),
                    ack_wait_s=c.ack_wait_s,
                    max_deliver=c.max_deliver,
                )
        raise KeyError("per-pool consumer")

    def fixed_consumers(self) -> tuple[ConsumerDecl, ...]:
        return tuple(c for c in self.consumers if not c.per_pool)


def _topology_text() -> str:
    packaged = resources.files("noetl_stream").joinpath("topology.yaml")
    if packaged.is_file():
        return packaged.read_text()
    # Editable installs do not carry force-included files: read the repository's copy.
    repo_copy = Path(__file__).resolve().parents[2] / "subjects" / "topology.yaml"
    return repo_copy.read_text()


@lru_cache(maxsize=8)
def load_topology(prefix: str = DEFAULT_PREFIX) -> Topology:
    raw: dict[str, Any] = YAML(typ="safe").load(_topology_text())

    def fill(text: str) -> str:
        return text.replace("{prefix}", prefix)

    retention = config.retention_s()
    streams = tuple(
        StreamDecl(
            name=s["name"],
            subjects=tuple(fill(x) for x in s["subjects"]),
            retention=s["retention"],
            duplicate_window_s=float(s["duplicate_window_s"]),
            # A stream's max age may not be below its duplicate window (JetStream refuses it).
            max_age_s=max(retention, float(s["duplicate_window_s"])) if s.get("follows_retention")
            else float(s["max_age_s"]),
            allow_msg_schedules=bool(s.get("allow_msg_schedules", False)),
        )
        for s in raw["streams"]
    )
    lease_ack_wait, lease_max_deliver = config.command_lease_overrides()
    router_ack_wait = config.router_ack_wait_override()

    def ack_wait(c: dict[str, Any]) -> float:
        if c.get("per_pool") and lease_ack_wait:
            return float(lease_ack_wait)
        if not c.get("per_pool") and router_ack_wait:
            return float(router_ack_wait)
        return float(c["ack_wait_s"])

    consumers = tuple(
        ConsumerDecl(
            stream=c["stream"],
            durable=c["durable"],
            filter_subjects=tuple(fill(x) for x in c["filter_subjects"]),
            ack_wait_s=ack_wait(c),
            max_deliver=int(lease_max_deliver if c.get("per_pool") and lease_max_deliver
                            else c["max_deliver"]),
            per_pool=bool(c.get("per_pool", False)),
        )
        for c in raw["consumers"]
    )
    buckets = tuple(
        BucketDecl(name=b["name"], history=int(b["history"]), ttl_s=b.get("ttl_s"))
        for b in raw["buckets"]
    )
    object_stores = tuple(ObjectStoreDecl(name=o["name"], ttl_s=retention if o.get("follows_retention")
                                          else o.get("ttl_s"))
                          for o in raw.get("object_stores") or ())
    return Topology(prefix, streams, consumers, buckets, dict(raw["subjects"]), object_stores)
