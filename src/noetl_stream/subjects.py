"""Every subject, stream, consumer and bucket name in one place, read from `subjects/topology.yaml`.

Pure: no NATS here; `bus/provision.py` turns this description into streams and buckets.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from pathlib import Path

from ruamel.yaml import YAML

from noetl_stream import config
from noetl_stream.messages import OUTCOME_EVENTS, split_outcome_pool
from noetl_stream.topology_file import (
    BucketSpec,
    ConsumerSpec,
    ObjectStoreSpec,
    RouterSpec,
    StreamSpec,
    TopologyFile,
)

DEFAULT_PREFIX = "noetl"
DEFAULT_POOL = "default"

# Event types that the worker publishes and the router consumes (their subject names the pool).
ROUTER_INPUT_EVENTS = OUTCOME_EVENTS
TERMINAL_EXECUTION_EVENTS = ("execution.completed", "execution.failed", "execution.cancelled")


@dataclass(frozen=True)
class StreamDecl:
    name: str
    subjects: tuple[str, ...]
    retention: str
    duplicate_window_s: float
    max_age_s: float
    allow_msg_schedules: bool = False  # durable timers (NATS message schedules)
    allow_msg_ttl: bool = False  # per-message TTLs (`Nats-TTL`; `never` outlives max age)
    # A stream fed from another one (`source`) instead of publishers: the source's messages on
    # `source_subjects`, each stored under the subject `transforms` gives it.
    source: str | None = None
    source_subjects: tuple[str, ...] = ()
    transforms: tuple[tuple[str, str], ...] = ()
    # What it may hold (its share of NOETL_STREAM_STORE_BYTES; -1: unbounded), what a write past
    # that does (`new`: refused, `old`: the oldest messages go), and messages kept per subject.
    max_bytes: int = -1
    discard: str = "old"
    max_msgs_per_subject: int = -1


@dataclass(frozen=True)
class ConsumerDecl:
    stream: str
    durable: str
    filter_subjects: tuple[str, ...]
    ack_wait_s: float
    max_deliver: int
    per_pool: bool = False


@dataclass(frozen=True)
class RouterDecl:
    """The router's partitioned consumers: `partitions` durables on `stream`, one per partition,
    each with the priority group `group` (pinned_client policy, pin dropped after `pin_ttl_s`
    without a pull request from its holder).
    """

    stream: str
    partitions: int
    durable: str  # with "{partition}"
    group: str
    pin_ttl_s: float
    ack_wait_s: float
    max_deliver: int
    subject_prefix: str  # "<prefix>.router"
    legacy_durable: str  # the shared consumer on the events stream of earlier versions
    legacy_stream: str

    def durable_of(self, partition: int) -> str:
        return self.durable.replace("{partition}", str(partition))

    def partition_filter(self, partition: int) -> str:
        return f"{self.subject_prefix}.{partition}.>"

    def consumers(self) -> tuple[ConsumerDecl, ...]:
        return tuple(self.consumer(p) for p in range(self.partitions))

    def consumer(self, partition: int) -> ConsumerDecl:
        return ConsumerDecl(stream=self.stream, durable=self.durable_of(partition),
                            filter_subjects=(self.partition_filter(partition),),
                            ack_wait_s=self.ack_wait_s, max_deliver=self.max_deliver)


@dataclass(frozen=True)
class BucketDecl:
    name: str
    history: int
    ttl_s: float | None = None
    max_bytes: int = -1  # its share of NOETL_STREAM_STORE_BYTES; -1: unbounded


@dataclass(frozen=True)
class ObjectStoreDecl:
    name: str
    ttl_s: float | None = None
    max_bytes: int = -1


@dataclass(frozen=True)
class Topology:
    """The declared NATS topology with `{prefix}` already filled in."""

    prefix: str
    streams: tuple[StreamDecl, ...]
    consumers: tuple[ConsumerDecl, ...]
    buckets: tuple[BucketDecl, ...]
    subject_templates: dict[str, str] = field(default_factory=dict)
    object_stores: tuple[ObjectStoreDecl, ...] = ()
    router: RouterDecl | None = None

    # -- subject builders ------------------------------------------------------------------
    def execute_request_subject(self) -> str:
        return f"{self.prefix}.requests.execute"

    def cancel_request_subject(self) -> str:
        return f"{self.prefix}.requests.cancel"

    def command_subject(self, pool: str, kind: str) -> str:
        return f"{self.prefix}.commands.{pool}.{kind}"

    def pool_of_command(self, subject: str) -> str:
        """`noetl.commands.<pool>.<kind>` -> `<pool>` ("" for another subject)."""
        head = f"{self.prefix}.commands."
        return subject[len(head):].split(".", 1)[0] if subject.startswith(head) else ""

    def command_filter(self, pool: str) -> str:
        return f"{self.prefix}.commands.{pool}.>"

    def event_subject(self, execution_id: str, event_type: str) -> str:
        return f"{self.prefix}.events.{execution_id}.{event_type}"

    def outcome_subject(self, execution_id: str, event_type: str, pool: str) -> str:
        """An outcome (ROUTER_INPUT_EVENTS) names the pool that ran the command last:
        `noetl.events.<id>.step.done.<pool>`. NATS lets each pool's worker user publish only
        its own, and the router accepts an outcome only from its command's pool.
        """
        return f"{self.prefix}.events.{execution_id}.{event_type}.{pool}"

    def execution_events_filter(self, execution_id: str) -> str:
        return f"{self.prefix}.events.{execution_id}.>"

    def signal_subject(self, execution_id: str, name: str) -> str:
        return f"{self.prefix}.events.{execution_id}.signal.{name}"

    def timer_schedule_subject(self, execution_id: str, timer: str) -> str:
        """Where a timer's schedule message waits; a new one on it replaces the old (a reset)."""
        return f"{self.prefix}.events.{execution_id}.timer.schedule.{timer}"

    def trigger_schedule_subject(self, name: str) -> str:
        """Where a trigger's schedule message waits for nats-server to fire it."""
        return f"{self.prefix}.triggers.schedule.{name}"

    def trigger_fire_subject(self, name: str) -> str:
        """A fire of a trigger: one execution to start."""
        return f"{self.prefix}.triggers.fire.{name}"

    def trigger_event_subject(self, name: str, event_type: str) -> str:
        """A change to a trigger (applied, paused, ...) or what one of its fires did."""
        return f"{self.prefix}.triggers.events.{name}.{event_type}"

    def dead_letter_subject(self, subject: str) -> str:
        """`noetl.commands.default.python` -> `noetl.dlq.commands.default.python`."""
        return f"{self.prefix}.dlq.{subject.split('.', 1)[-1]}"

    def dead_letter_filter(self) -> str:
        return f"{self.prefix}.dlq.>"

    def event_type_of(self, subject: str) -> str:
        """`noetl.events.<id>.step.done.<pool>` -> `step.done` (a router copy's subject too)."""
        parts = self.published_subject(subject).split(".", 3)
        return split_outcome_pool(parts[3])[0] if len(parts) == 4 else ""

    def published_subject(self, subject: str) -> str:
        """The subject an event was published on, from the subject of its copy in the router's
        stream (`noetl.router.<partition>.<id>.<type>` -> `noetl.events.<id>.<type>`); any
        other subject as it is.
        """
        head = f"{self.prefix}.router."
        if not subject.startswith(head):
            return subject
        _, _, rest = subject[len(head):].partition(".")
        return f"{self.prefix}.events.{rest}"

    def router_decl(self) -> RouterDecl:
        if self.router is None:
            raise KeyError("router")
        return self.router

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


def _window(stream: StreamSpec, configured: float) -> float:
    """A stream's duplicate window: NOETL_STREAM_DUPLICATE_WINDOW for the streams publishers
    write to (`follows_duplicate_window`), its own otherwise; never longer than a stream's max
    age where it has one (JetStream refuses a window beyond it).
    """
    own = float(stream["duplicate_window_s"])
    window = configured if stream.get("follows_duplicate_window") else own
    max_age = float(stream.get("max_age_s", 0))
    return min(window, max_age) if max_age > 0 else window


def _topology_text() -> str:
    packaged = resources.files("noetl_stream").joinpath("topology.yaml")
    if packaged.is_file():
        return packaged.read_text()
    # Editable installs do not carry force-included files: read the repository's copy.
    repo_copy = Path(__file__).resolve().parents[2] / "subjects" / "topology.yaml"
    return repo_copy.read_text()


@lru_cache(maxsize=8)
def load_topology(prefix: str = DEFAULT_PREFIX) -> Topology:
    raw: TopologyFile = YAML(typ="safe").load(_topology_text())

    def fill(text: str) -> str:
        return text.replace("{prefix}", prefix)

    window = config.duplicate_window_s()
    budget = config.store_bytes()

    def share(decl: StreamSpec | BucketSpec | ObjectStoreSpec) -> int:
        return int(budget * float(decl["store_share"])) if budget and "store_share" in decl else -1

    streams = tuple(
        StreamDecl(
            name=s["name"],
            subjects=tuple(fill(x) for x in s.get("subjects") or ()),
            retention=s["retention"],
            duplicate_window_s=_window(s, window),
            max_age_s=float(s["max_age_s"]),  # 0: no age limit
            allow_msg_schedules=bool(s.get("allow_msg_schedules", False)),
            allow_msg_ttl=bool(s.get("allow_msg_ttl", False)),
            source=s.get("source"),
            source_subjects=tuple(fill(x) for x in s.get("source_subjects") or ()),
            transforms=tuple((fill(x), _router_copy_subject(fill(x), prefix, raw["router"]))
                             for x in s.get("source_subjects") or ()),
            max_bytes=share(s), discard=str(s.get("discard", "old")),
            max_msgs_per_subject=int(s.get("max_msgs_per_subject", -1)),
        )
        for s in raw["streams"]
    )
    lease_ack_wait, lease_max_deliver = config.command_lease_overrides()
    router_ack_wait = config.router_ack_wait_override()

    def ack_wait(c: ConsumerSpec) -> float:
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
        BucketDecl(name=b["name"], history=int(b["history"]), ttl_s=b.get("ttl_s"),
                   max_bytes=share(b))
        for b in raw["buckets"]
    )
    object_stores = tuple(ObjectStoreDecl(name=o["name"], ttl_s=o.get("ttl_s"), max_bytes=share(o))
                          for o in raw.get("object_stores") or ())
    return Topology(prefix, streams, consumers, buckets, dict(raw["subjects"]), object_stores,
                    _router(raw["router"], prefix, router_ack_wait))


def _router(raw: RouterSpec, prefix: str, ack_wait_override: float | None) -> RouterDecl:
    return RouterDecl(stream=raw["stream"], partitions=int(raw["partitions"]),
                      durable=raw["durable"], group=raw["group"], pin_ttl_s=float(raw["pin_ttl_s"]),
                      ack_wait_s=float(ack_wait_override or raw["ack_wait_s"]),
                      max_deliver=int(raw["max_deliver"]), subject_prefix=f"{prefix}.router",
                      legacy_durable=raw["legacy_durable"], legacy_stream="NOETL_EVENTS")


def _router_copy_subject(source_subject: str, prefix: str, raw: RouterSpec) -> str:
    """`noetl.events.*.step.done` -> `noetl.router.{{partition(16,1)}}.{{wildcard(1)}}.step.done`:
    nats-server hashes the execution id (the first wildcard) into one of the partitions.
    """
    head = f"{prefix}.events.*."
    if not source_subject.startswith(head):
        raise ValueError(f"router source subject {source_subject} is not {head}<event type>")
    partitions = int(raw["partitions"])
    tail = source_subject[len(head):].split(".")
    # Later wildcards (an outcome's pool) keep their token in the copy.
    wildcards = iter(range(2, len(tail) + 2))
    tail = [f"{{{{wildcard({next(wildcards)})}}}}" if token == "*" else token for token in tail]
    return (f"{prefix}.router.{{{{partition({partitions},1)}}}}.{{{{wildcard(1)}}}}."
            f"{'.'.join(tail)}")
