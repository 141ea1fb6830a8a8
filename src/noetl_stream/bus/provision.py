"""Create the declared streams, consumers and buckets idempotently, and report drift.

Drift = a stream or consumer exists with settings other than the declared ones. We update what
JetStream lets us update and report the rest, rather than deleting data a user may need.

A process whose NATS user may not create streams (a worker or client on the least-privilege
accounts of deploy/nats/accounts) gets no answer to a create request; it then accepts what the
server user provisioned, and fails with advice only when that is missing too. Replicas (3 in a
cluster) are compared only when asked for, so a process started without them never shrinks R3.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from functools import partial

from nats.errors import Error as NatsError
from nats.js.api import (
    AckPolicy,
    ConsumerConfig,
    DeliverPolicy,
    DiscardPolicy,
    KeyValueConfig,
    ObjectStoreConfig,
    RetentionPolicy,
    StorageType,
    StreamConfig,
    StreamInfo,
    StreamSource,
    SubjectTransform,
)
from nats.js.errors import APIError, BadRequestError, NotFoundError

from noetl_stream import config
from noetl_stream.bus.connection import Bus
from noetl_stream.bus.js_api import js_request
from noetl_stream.bus.storage import STORAGE_RESOURCES_EXCEEDED
from noetl_stream.errors import InfrastructureError
from noetl_stream.jsonutil import JsonObject
from noetl_stream.subjects import ConsumerDecl, RouterDecl, StreamDecl

_RETENTION = {"workqueue": RetentionPolicy.WORK_QUEUE, "limits": RetentionPolicy.LIMITS}

log = logging.getLogger("noetl_stream.provision")

PROVISION_PATIENCE_S = 60.0
API_TIMEOUT_S = 5.0  # a JetStream API request nats-py's context does not make (bus/js_api.py)


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


async def _create(report: ProvisionReport, name: str, create: Awaitable[object],
                  exists: Callable[[], Awaitable[bool]]) -> None:
    """Run `create`, accepting an existing one when we are not permitted to create it: NATS drops
    a request its user may not publish, so the sign of that is a timeout.
    """
    try:
        await create
    except APIError as exc:
        if getattr(exc, "err_code", None) != STORAGE_RESOURCES_EXCEEDED:
            raise
        # JetStream reserves each stream's max_bytes in its store when it is created.
        raise InfrastructureError(
            f"cannot create {name}: JetStream has no room to reserve its byte bound "
            f"({exc.description}); NOETL_STREAM_STORE_BYTES ({config.store_bytes()} bytes in all) "
            "must fit in JetStream's store (max_file_store, or 75% of the free disk) and the "
            "account's max_file: set it lower or give JetStream more") from None
    except TimeoutError:
        if not await exists():
            raise InfrastructureError(
                f"cannot create {name}: JetStream did not answer (is this NATS user allowed to "
                "create it? run `noetl-stream init` as the server user first)") from None
        log.info("provision: %s exists; this NATS user did not create it", name)
        report.unchanged.append(name)
        return
    report.created.append(name)


async def stream_infos(bus: Bus) -> dict[str, StreamInfo]:
    """Every stream of the account by name, from the stream list (`$JS.API.STREAM.LIST`).

    The list never carries per-subject counts, unlike `STREAM.INFO` with a subject filter, which
    would name every key of a bucket (credentials, users, executions); so the restricted users
    of deploy/nats/accounts check the topology through the list and may not ask for infos.
    """
    infos: dict[str, StreamInfo] = {}
    while True:
        page = await bus.js.streams_info(offset=len(infos))
        fresh = [i for i in page if i.config.name and i.config.name not in infos]
        if not fresh:
            return infos
        infos.update((str(i.config.name), i) for i in fresh)


async def _stream_exists(bus: Bus, stream: str) -> bool:
    return stream in await stream_infos(bus)


async def _consumer_exists(bus: Bus, stream: str, durable: str) -> bool:
    try:
        await bus.js.consumer_info(stream, durable)
    except NotFoundError:
        return False
    return True


def _check_replicas(name: str, info: StreamInfo, replicas: int | None,
                    report: ProvisionReport) -> None:
    """Report a bucket or object store whose replicas differ from those asked for."""
    if replicas is None:
        return
    have = info.config.num_replicas or 1
    if have != replicas:
        report.drift.append(f"{name}: {have} replicas, declared {replicas}")


async def _ensure_store_age(bus: Bus, name: str, info: StreamInfo, ttl_s: float | None,
                            report: ProvisionReport) -> None:
    """Give an existing store the declared age limit: earlier versions created the results
    store with one, which would drop what running executions still refer to.
    """
    if abs((info.config.max_age or 0) - (ttl_s or 0)) <= 1:
        report.unchanged.append(name)
        return
    info.config.max_age = ttl_s or 0
    try:
        await bus.js.update_stream(info.config)
        report.updated.append(f"{name}: max age {ttl_s or 'none'}")
    except Exception as exc:  # see ensure_consumer
        report.drift.append(f"{name}: {exc}")


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
        await _create(report, name, bus.js.add_consumer(decl.stream, want),
                      partial(_consumer_exists, bus, decl.stream, decl.durable))
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


def _stream_config(s: StreamDecl, replicas: int | None, start_seq: int | None = None,
                   ) -> StreamConfig:
    sources = None
    if s.source is not None:
        sources = [StreamSource(name=s.source, opt_start_seq=start_seq,
                                subject_transforms=[SubjectTransform(src=src, dest=dest)
                                                    for src, dest in s.transforms])]
    return StreamConfig(name=s.name, subjects=list(s.subjects) or None,
                        retention=_RETENTION[s.retention], storage=StorageType.FILE,
                        duplicate_window=s.duplicate_window_s, max_age=s.max_age_s,
                        allow_msg_schedules=True if s.allow_msg_schedules else None,
                        allow_msg_ttl=True if s.allow_msg_ttl else None,
                        num_replicas=replicas or 1, sources=sources, max_bytes=s.max_bytes,
                        discard=DiscardPolicy.NEW if s.discard == "new" else DiscardPolicy.OLD,
                        max_msgs_per_subject=s.max_msgs_per_subject)


def _bounds_of(config: StreamConfig) -> tuple[int, str, int]:
    # A config read back from the server holds the policy as text, one we build as the enum.
    discard = str(getattr(config.discard, "value", config.discard or DiscardPolicy.OLD.value))
    return (config.max_bytes if config.max_bytes is not None else -1, discard,
            config.max_msgs_per_subject if config.max_msgs_per_subject is not None else -1)


def _transforms_of(config: StreamConfig) -> list[tuple[str, str, str]]:
    return sorted((src.name, t.src, t.dest) for src in config.sources or []
                  for t in src.subject_transforms or [])


async def _ensure_stream(bus: Bus, s: StreamDecl, infos: dict[str, StreamInfo],
                         replicas: int | None, report: ProvisionReport) -> None:
    info = infos.get(s.name)
    if info is None:
        start = await _source_start(bus, s, infos) if s.source is not None else None
        await _create(report, f"stream {s.name}", bus.js.add_stream(_stream_config(s, replicas, start)),
                      partial(_stream_exists, bus, s.name))
        return
    have = info.config
    want = _stream_config(s, replicas)
    if replicas is None:
        want.num_replicas = have.num_replicas  # not asked for: keep what the stream has
    if want.sources and have.sources:
        # Where sourcing started is the stream's history, not a setting to correct.
        want.sources[0].opt_start_seq = have.sources[0].opt_start_seq
    if sorted(have.subjects or []) != sorted(s.subjects) or \
            have.duplicate_window != s.duplicate_window_s or \
            abs((have.max_age or 0) - s.max_age_s) > 1 or \
            (replicas is not None and (have.num_replicas or 1) != replicas) or \
            (s.allow_msg_schedules and not have.allow_msg_schedules) or \
            (s.allow_msg_ttl and not have.allow_msg_ttl) or \
            _transforms_of(have) != _transforms_of(want) or _bounds_of(have) != _bounds_of(want):
        try:
            await bus.js.update_stream(want)
            report.updated.append(f"stream {s.name}")
        except Exception as exc:  # see ensure_consumer
            report.drift.append(f"stream {s.name}: {exc}")
    else:
        report.unchanged.append(f"stream {s.name}")


async def _source_start(bus: Bus, s: StreamDecl, infos: dict[str, StreamInfo]) -> int:
    """Where a new router stream starts copying the events stream: after the last event the
    previous layout's shared router consumer acknowledged, so the events it had not applied yet
    (executions in flight at the upgrade) are applied from the copy; on a store without that
    consumer, after the last stored event (history is not replayed).
    """
    assert s.source is not None
    router = bus.topology.router_decl()
    try:
        legacy = await bus.js.consumer_info(router.legacy_stream, router.legacy_durable)
        return int(legacy.ack_floor.stream_seq if legacy.ack_floor else 0) + 1
    except NotFoundError:
        pass
    source = infos.get(s.source)
    return int(source.state.last_seq) + 1 if source is not None else 1


def router_consumer_config(router: RouterDecl, partition: int) -> JsonObject:
    """The JSON config of a partition's durable; nats-py has no fields for priority groups."""
    return {"durable_name": router.durable_of(partition), "ack_policy": "explicit",
            "deliver_policy": "all", "ack_wait": int(router.ack_wait_s * 1e9),
            "max_deliver": router.max_deliver, "max_ack_pending": 20000,
            "filter_subject": router.partition_filter(partition),
            "priority_groups": [router.group], "priority_policy": "pinned_client",
            "priority_timeout": int(router.pin_ttl_s * 1e9)}


_COMPARED = ("filter_subject", "ack_wait", "max_deliver", "priority_groups", "priority_policy",
             "priority_timeout")


async def _create_router_consumer(bus: Bus, stream: str, config: JsonObject) -> None:
    answer = await js_request(bus, f"CONSUMER.CREATE.{stream}.{config['durable_name']}",
                              {"stream_name": stream, "config": config}, timeout_s=API_TIMEOUT_S)
    if "error" in answer:
        error = answer["error"]
        detail = error.get("description", error) if isinstance(error, dict) else error
        raise InfrastructureError(f"consumer {stream}/{config['durable_name']}: {detail}")


async def ensure_router_consumers(bus: Bus, router: RouterDecl, report: ProvisionReport) -> None:
    """One pinned durable per partition, then the previous layout's shared consumer goes: its
    unacknowledged events were copied into the router stream when that was created.
    """
    for partition in range(router.partitions):
        want, durable = router_consumer_config(router, partition), router.durable_of(partition)
        name = f"consumer {router.stream}/{durable}"
        info = await js_request(bus, f"CONSUMER.INFO.{router.stream}.{durable}",
                                timeout_s=API_TIMEOUT_S)
        if "error" in info:
            await _create(report, name, _create_router_consumer(bus, router.stream, want),
                          partial(_consumer_exists, bus, router.stream, durable))
            continue
        have = info.get("config")
        if isinstance(have, dict) and all(have.get(k) == want[k] for k in _COMPARED):
            report.unchanged.append(name)
            continue
        try:
            await _create_router_consumer(bus, router.stream, want)
            report.updated.append(name)
        except InfrastructureError as exc:
            report.drift.append(f"{name}: {exc}")
    await _retire_legacy_router(bus, router, report)


async def _retire_legacy_router(bus: Bus, router: RouterDecl, report: ProvisionReport) -> None:
    if not await _consumer_exists(bus, router.legacy_stream, router.legacy_durable):
        return
    try:
        await bus.js.delete_consumer(router.legacy_stream, router.legacy_durable)
    except NotFoundError:  # another process retired it first
        return
    except TimeoutError:  # a NATS user not allowed to delete it: the server user will
        log.info("provision: %s/%s left for the server user to retire", router.legacy_stream,
                 router.legacy_durable)
        return
    report.updated.append(f"consumer {router.legacy_stream}/{router.legacy_durable}: retired, "
                          f"its events moved to {router.stream}")


async def provision(bus: Bus, pools: tuple[str, ...] = ("default",),
                    replicas: int | None = None) -> ProvisionReport:
    """`replicas` (else NOETL_STREAM_REPLICAS) sets streams, buckets and object stores to R-N;
    unset, new ones are R1 and existing ones keep theirs.
    """
    report = ProvisionReport()
    replicas = replicas or config.replicas_from_env()
    topo = bus.topology
    infos = await stream_infos(bus)
    for s in topo.streams:
        await _ensure_stream(bus, s, infos, replicas, report)
    for decl in topo.fixed_consumers():
        await ensure_consumer(bus, decl, report)
    await ensure_router_consumers(bus, topo.router_decl(), report)
    for pool in pools:
        await ensure_consumer(bus, topo.pool_consumer(pool), report)
    for b in topo.buckets:
        if (kv_info := infos.get(f"KV_{b.name}")) is not None:
            await _bound_store(bus, f"bucket {b.name}", b.max_bytes, kv_info, report)
            _check_replicas(f"bucket {b.name}", kv_info, replicas, report)
        else:
            await _create(report, f"bucket {b.name}", bus.js.create_key_value(KeyValueConfig(
                bucket=b.name, history=b.history, ttl=b.ttl_s, storage=StorageType.FILE,
                replicas=replicas or 1, max_bytes=b.max_bytes)),
                partial(_stream_exists, bus, f"KV_{b.name}"))
    for o in topo.object_stores:
        if (obj_info := infos.get(f"OBJ_{o.name}")) is not None:
            await _ensure_store_age(bus, f"object store {o.name}", obj_info, o.ttl_s, report)
            await _bound_store(bus, f"object store {o.name}", o.max_bytes, obj_info, report)
            _check_replicas(f"object store {o.name}", obj_info, replicas, report)
        else:
            await _create(report, f"object store {o.name}", bus.js.create_object_store(
                o.name, ObjectStoreConfig(bucket=o.name, ttl=o.ttl_s, storage=StorageType.FILE,
                                          replicas=replicas or 1, max_bytes=o.max_bytes)),
                partial(_stream_exists, bus, f"OBJ_{o.name}"))
    return report


async def _bound_store(bus: Bus, name: str, max_bytes: int, info: StreamInfo,
                       report: ProvisionReport) -> None:
    """A bucket or object store made before it had a byte bound (or with another) gets the
    declared one, unless it already holds more: lowering the bound below that would make
    JetStream drop stored entries, so that is reported as drift instead.
    """
    if (info.config.max_bytes if info.config.max_bytes is not None else -1) == max_bytes:
        report.unchanged.append(name)
        return
    if max_bytes >= 0 and int(info.state.bytes or 0) > max_bytes:
        report.drift.append(f"{name} holds {info.state.bytes} bytes, more than its bound of "
                            f"{max_bytes}; raise NOETL_STREAM_STORE_BYTES")
        return
    info.config.max_bytes = max_bytes
    try:
        await bus.js.update_stream(info.config)
        report.updated.append(name)
    except Exception as exc:  # see ensure_consumer
        report.drift.append(f"{name}: {exc}")


async def provision_patiently(bus: Bus, pools: tuple[str, ...] = ("default",),
                              replicas: int | None = None, *,
                              patience_s: float = PROVISION_PATIENCE_S) -> ProvisionReport:
    """`provision`, retried for a while when NATS cannot answer yet: a cluster electing a new
    leader, or one whose peers have not all reported in, answers with timeouts, 503s and "no
    suitable peers" for seconds, and a process started at that moment should wait it out rather
    than exit.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + patience_s
    while True:
        try:
            return await provision(bus, pools, replicas)
        except (NatsError, TimeoutError) as exc:
            transient = not isinstance(exc, BadRequestError) or \
                "no suitable peers" in str(exc.description or "")
            if not transient or loop.time() > deadline:
                raise
            log.warning("provisioning: NATS cannot answer yet (%s); trying again",
                        exc or type(exc).__name__)
            await asyncio.sleep(1.0)
