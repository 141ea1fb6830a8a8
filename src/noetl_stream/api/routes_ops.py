"""GET /health (no authentication) and GET /metrics (Prometheus text format).

Health answers 200 when all is well and 503 `degraded` with the reasons in `problems` when NATS
or JetStream do not answer, when a pool has commands waiting and no live worker (heartbeats,
bus/heartbeats.py), or when the router's consumer lags more than ROUTER_LAG_THRESHOLD events
behind. Metrics: observe/metrics.py and server/cluster_metrics.py.
"""

from __future__ import annotations

import os

from aiohttp import web
from nats.errors import Error as NatsError
from nats.js.api import ConsumerInfo

from noetl_stream.api.context import api_context
from noetl_stream.api.endpoints import Endpoint, json_response
from noetl_stream.api.models import ConsumerHealth, Health, PoolHealth, SkippedRecord
from noetl_stream.bus.connection import Bus
from noetl_stream.bus.heartbeats import live_processes
from noetl_stream.observe.metrics import CONTENT_TYPE, pool_of_consumer
from noetl_stream.server.cluster_metrics import consumers as read_consumers
from noetl_stream.server.cluster_metrics import metrics_text
from noetl_stream.state.records import Skips

ENV_ROUTER_LAG = "NOETL_STREAM_HEALTH_ROUTER_LAG"
ROUTER_LAG_THRESHOLD = 10_000  # events not yet delivered to the router


def router_lag_threshold() -> int:
    try:
        return int(os.environ.get(ENV_ROUTER_LAG, ROUTER_LAG_THRESHOLD))
    except ValueError:
        return ROUTER_LAG_THRESHOLD


def _health_of(info: ConsumerInfo) -> ConsumerHealth:
    return ConsumerHealth(stream=info.stream_name, consumer=info.name,
                          num_pending=int(info.num_pending or 0),
                          num_ack_pending=int(info.num_ack_pending or 0),
                          num_redelivered=int(info.num_redelivered or 0))


async def health_report(bus: Bus) -> Health:
    """What /health answers; `status` is `degraded` whenever `problems` is not empty."""
    problems: list[str] = []
    nats_ok = bus.nc.is_connected
    if not nats_ok:
        problems.append("not connected to NATS")
    infos: list[ConsumerInfo] = []
    pools: list[PoolHealth] = []
    skips = Skips("heartbeat")
    jetstream_ok = False
    if nats_ok:
        try:
            await bus.js.account_info()
            jetstream_ok = True
            infos = await read_consumers(bus)
            pools = await pool_health(bus, infos, skips)
        except (NatsError, TimeoutError, OSError) as exc:
            # Health must answer whatever is broken; what broke is the answer.
            problems.append(f"JetStream: {type(exc).__name__}: {exc}")
    for pool in pools:
        if pool.pending_commands and not pool.live_workers:
            problems.append(f"pool {pool.pool!r} has {pool.pending_commands} pending command(s) "
                            "and no live worker")
    threshold = router_lag_threshold()
    router = bus.topology.router_decl()
    partitions = {router.durable_of(p) for p in range(router.partitions)}
    lag = sum(int(info.num_pending or 0) for info in infos
              if info.stream_name == router.stream and info.name in partitions)
    if lag > threshold:
        problems.append(f"the router's consumers lag {lag} events behind "
                        f"(threshold {threshold}, {ENV_ROUTER_LAG})")
    return Health(status="degraded" if problems else "ok", nats=nats_ok, jetstream=jetstream_ok,
                  consumers=[_health_of(c) for c in infos], pools=pools, problems=problems,
                  skipped=[SkippedRecord(key=s.key, reason=s.reason) for s in skips.items])


async def pool_health(bus: Bus, infos: list[ConsumerInfo],
                      skips: Skips | None = None) -> list[PoolHealth]:
    """Each worker pool's waiting commands and live workers (heartbeats)."""
    live: dict[str, int] = {}
    for process in await live_processes(bus, skips):
        if process.get("role") == "worker":
            live[str(process.get("pool"))] = live.get(str(process.get("pool")), 0) + 1
    out = []
    for info in infos:
        pool = pool_of_consumer(info.name)
        if pool is not None:
            out.append(PoolHealth(pool=pool, pending_commands=int(info.num_pending or 0),
                                  live_workers=live.get(pool, 0)))
    return out


async def health(request: web.Request) -> web.StreamResponse:
    body = await health_report(api_context(request).bus)
    return json_response(body, 200 if body.status == "ok" else 503)


async def metrics(request: web.Request) -> web.StreamResponse:
    ctx = api_context(request)
    return web.Response(body=await metrics_text(ctx.bus), headers={"Content-Type": CONTENT_TYPE})


ENDPOINTS = [
    Endpoint("GET", "/health", health, "NATS and JetStream reachability, consumer lag, pools "
             "with waiting commands and no live worker (no authentication)", None, "ops",
             response=Health, errors=(503,)),
    Endpoint("GET", "/metrics", metrics, "Prometheus metrics (text format 0.0.4)", "read", "ops",
             produces="text/plain"),
]

