"""Create the declared streams, consumers and buckets idempotently, and report drift.

Drift = a stream or consumer exists with settings other than the declared ones. We update what
JetStream lets us update and report the rest, rather than deleting data a user may need.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from nats.js.api import (
    AckPolicy,
    ConsumerConfig,
    DeliverPolicy,
    KeyValueConfig,
    ObjectStoreConfig,
    RetentionPolicy,
    StorageType,
    StreamConfig,
)
from nats.js.errors import BucketNotFoundError, NotFoundError

from noetl_stream.runtime.connection import Bus
from noetl_stream.subjects import ConsumerDecl

_RETENTION = {"workqueue": RetentionPolicy.WORK_QUEUE, "limits": RetentionPolicy.LIMITS}


@dataclass
class ProvisionReport:
    created: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    drift: list[str] = field(default_factory=list)

    def lines(self) -> list[str]:
        out = [f"created   {x}" for x in self.created]
        out += [f"updated   {x}" for x in self.updated]
        out += [f"unchanged {x}" for x in self.unchanged]
        out += [f"DRIFT     {x}" for x in self.drift]
        return out


def consumer_config(decl: ConsumerDecl) -> ConsumerConfig:
    filters = list(decl.filter_subjects)
    return ConsumerConfig(
        durable_name=decl.durable,
        ack_policy=AckPolicy.EXPLICIT,
        deliver_policy=DeliverPolicy.ALL,
        ack_wait=decl.ack_wait_s,
        max_deliver=decl.max_deliver,
        max_ack_pending=20000,
        filter_subject=filters[0] if len(filters) == 1 else None,
        filter_subjects=filters if len(filters) > 1 else None,
    )


async def ensure_consumer(bus: Bus, decl: ConsumerDecl, report: ProvisionReport) -> None:
    name = f"consumer {decl.stream}/{decl.durable}"
    want = consumer_config(decl)
    try:
        info = await bus.js.consumer_info(decl.stream, decl.durable)
    except NotFoundError:
        await bus.js.add_consumer(decl.stream, want)
        report.created.append(name)
        return
    have = info.config
    have_filters = sorted(have.filter_subjects or ([have.filter_subject] if have.filter_subject else []))
    if have_filters != sorted(decl.filter_subjects) or have.ack_wait != decl.ack_wait_s or \
            have.max_deliver != decl.max_deliver:
        try:
            # add_consumer with an existing durable name updates it (consumer create is idempotent).
            await bus.js.add_consumer(decl.stream, want)
            report.updated.append(name)
        except Exception as exc:  # JetStream refuses some changes; tell the operator, keep going
            report.drift.append(f"{name}: declared {decl.filter_subjects}, server has "
                                f"{have_filters}: {exc}")
    else:
        report.unchanged.append(name)


async def provision(bus: Bus, pools: tuple[str, ...] = ("default",)) -> ProvisionReport:
    report = ProvisionReport()
    topo = bus.topology
    for s in topo.streams:
        want = StreamConfig(name=s.name, subjects=list(s.subjects), retention=_RETENTION[s.retention],
                            storage=StorageType.FILE, duplicate_window=s.duplicate_window_s,
                            max_age=s.max_age_s,
                            allow_msg_schedules=True if s.allow_msg_schedules else None)
        try:
            info = await bus.js.stream_info(s.name)
        except NotFoundError:
            await bus.js.add_stream(want)
            report.created.append(f"stream {s.name}")
            continue
        have = info.config
        if sorted(have.subjects or []) != sorted(s.subjects) or \
                have.duplicate_window != s.duplicate_window_s or \
                (s.allow_msg_schedules and not have.allow_msg_schedules):
            try:
                await bus.js.update_stream(want)
                report.updated.append(f"stream {s.name}")
            except Exception as exc:  # see ensure_consumer
                report.drift.append(f"stream {s.name}: {exc}")
        else:
            report.unchanged.append(f"stream {s.name}")
    for decl in topo.fixed_consumers():
        await ensure_consumer(bus, decl, report)
    for pool in pools:
        await ensure_consumer(bus, topo.pool_consumer(pool), report)
    for b in topo.buckets:
        try:
            await bus.js.key_value(b.name)
            report.unchanged.append(f"bucket {b.name}")
        except BucketNotFoundError:
            await bus.js.create_key_value(KeyValueConfig(bucket=b.name, history=b.history,
                                                         ttl=b.ttl_s, storage=StorageType.FILE))
            report.created.append(f"bucket {b.name}")
    for o in topo.object_stores:
        try:
            await bus.js.object_store(o.name)
            report.unchanged.append(f"object store {o.name}")
        except NotFoundError:
            await bus.js.create_object_store(o.name, ObjectStoreConfig(
                bucket=o.name, ttl=o.ttl_s, storage=StorageType.FILE))
            report.created.append(f"object store {o.name}")
    return report
