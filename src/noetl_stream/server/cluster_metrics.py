"""What a server reads from JetStream and KV when scraped or asked for health: consumers and
their lag, stream sizes, executions by status, live processes (heartbeats).
"""

from __future__ import annotations

import asyncio
from collections import Counter

from nats.errors import Error as NatsError
from nats.js.api import ConsumerInfo
from prometheus_client.core import GaugeMetricFamily

from noetl_stream import jsonutil
from noetl_stream.bus.connection import Bus
from noetl_stream.bus.heartbeats import live_processes
from noetl_stream.observe.metrics import gauge, pool_of_consumer, process_families, process_text, render
from noetl_stream.state.kv_keys import bucket_keys

EXECUTIONS_BUCKET = "noetl_executions"


async def consumers(bus: Bus) -> list[ConsumerInfo]:
    """The server's consumers (the router's partitions too) and every worker pool's."""
    topo = bus.topology
    out = [await bus.js.consumer_info(c.stream, c.durable)
           for c in (*topo.fixed_consumers(), *topo.router_decl().consumers())]
    streams = {c.stream for c in topo.consumers if c.per_pool}
    for stream in sorted(streams):
        out += [c for c in await bus.js.consumers_info(stream) if pool_of_consumer(c.name)]
    return out


async def execution_statuses(bus: Bus) -> Counter[str]:
    kv = await bus.js.key_value(EXECUTIONS_BUCKET)
    statuses: Counter[str] = Counter()
    for key in await bucket_keys(bus.js, EXECUTIONS_BUCKET):
        try:
            entry = await kv.get(key)
        except (NatsError, TimeoutError):  # deleted or expired since the listing, or NATS busy
            continue
        state = jsonutil.loads_object(entry.value or b"")
        if state is not None:
            statuses[str(state.get("status", "running"))] += 1
    return statuses


async def cluster_families(bus: Bus) -> list[GaugeMetricFamily]:
    statuses = await execution_statuses(bus)
    infos = await consumers(bus)
    families = [gauge("noetl_executions", "Executions in KV noetl_executions by status.",
                      ["status"], [([s], n) for s, n in sorted(statuses.items())])]
    for name, field, text in (
            ("noetl_consumer_pending_messages", "num_pending", "Messages not yet delivered (lag)."),
            ("noetl_consumer_ack_pending_messages", "num_ack_pending", "Delivered, not yet acked."),
            ("noetl_consumer_redelivered_messages", "num_redelivered", "Messages delivered more "
             "than once.")):
        families.append(gauge(name, text, ["stream", "consumer"],
                              [([c.stream_name, c.name], int(getattr(c, field) or 0)) for c in infos]))
    pools = {pool: c for c in infos if (pool := pool_of_consumer(c.name))}
    families.append(gauge("noetl_pool_pending_commands", "Commands of each pool not yet taken by "
                          "a worker (queue depth).", ["pool"],
                          [([p], int(c.num_pending or 0)) for p, c in sorted(pools.items())]))
    families.append(gauge("noetl_pool_redelivered_commands", "Commands of each pool delivered "
                          "more than once and not yet acknowledged.", ["pool"],
                          [([p], int(c.num_redelivered or 0)) for p, c in sorted(pools.items())]))
    streams = [await bus.js.stream_info(s.name) for s in bus.topology.streams]
    families.append(gauge("noetl_stream_messages", "Messages stored per stream.", ["stream"],
                          [([s.config.name or ""], int(s.state.messages)) for s in streams]))
    families += process_families(await live_processes(bus), pools)
    return families


async def metrics_text(bus: Bus) -> bytes:
    """The process's own series, then what JetStream and KV say now."""
    # The process collector reads /proc files: in a thread, off the loop.
    return await asyncio.to_thread(process_text) + render(await cluster_families(bus))
