"""GET /health (no authentication) and GET /metrics (Prometheus text format).

Health answers 200 when NATS and JetStream answer, 503 otherwise, and shows the lag of the
server's consumers and of every worker pool's. Metrics are read from JetStream at scrape time,
except the step latency histogram (see `metrics.py`).
"""

from __future__ import annotations

import time
from collections import Counter
from typing import Any

from aiohttp import web
from nats.errors import Error as NatsError
from nats.js.api import ConsumerInfo

from noetl_stream.api.context import ApiContext, api_context
from noetl_stream.api.endpoints import Endpoint, json_response
from noetl_stream.api.execution_lookup import load_state
from noetl_stream.api.metrics import family, sample
from noetl_stream.api.models import ConsumerHealth, Health
from noetl_stream.runtime.heartbeats import live_processes
from noetl_stream.state.kv_keys import bucket_keys

WORKER_CONSUMER_PREFIX = "noetl-workers-"


async def _consumers(ctx: ApiContext) -> list[ConsumerInfo]:
    """The server's consumers and every worker pool's."""
    topo = ctx.bus.topology
    out = [await ctx.bus.js.consumer_info(c.stream, c.durable) for c in topo.fixed_consumers()]
    pools = {c.stream for c in topo.consumers if c.per_pool}
    for stream in sorted(pools):
        out += [c for c in await ctx.bus.js.consumers_info(stream)
                if c.name.startswith(WORKER_CONSUMER_PREFIX)]
    return out


def _health_of(info: ConsumerInfo) -> ConsumerHealth:
    return ConsumerHealth(stream=info.stream_name, consumer=info.name,
                          num_pending=int(info.num_pending or 0),
                          num_ack_pending=int(info.num_ack_pending or 0),
                          num_redelivered=int(info.num_redelivered or 0))


async def health(request: web.Request) -> web.StreamResponse:
    ctx = api_context(request)
    problems: list[str] = []
    nats_ok = ctx.bus.nc.is_connected
    if not nats_ok:
        problems.append("not connected to NATS")
    consumers: list[ConsumerHealth] = []
    jetstream_ok = False
    if nats_ok:
        try:
            await ctx.bus.js.account_info()
            jetstream_ok = True
            consumers = [_health_of(c) for c in await _consumers(ctx)]
        except (NatsError, TimeoutError, OSError) as exc:
            # Health must answer whatever is broken; what broke is the answer.
            problems.append(f"JetStream: {type(exc).__name__}: {exc}")
    ok = nats_ok and jetstream_ok
    body = Health(status="ok" if ok else "degraded", nats=nats_ok, jetstream=jetstream_ok,
                  consumers=consumers, problems=problems)
    return json_response(body, 200 if ok else 503)


async def metrics(request: web.Request) -> web.StreamResponse:
    ctx = api_context(request)
    lines: list[str] = []
    statuses: Counter[str] = Counter()
    for execution_id in await bucket_keys(ctx.bus.js, "noetl_executions"):
        state = await load_state(ctx, execution_id)
        if state is not None:
            statuses[state.status] += 1
    lines += family("noetl_executions", "gauge", "Executions in KV noetl_executions by status.",
                    [sample("noetl_executions", {"status": s}, n) for s, n in sorted(statuses.items())])
    consumers = await _consumers(ctx)
    for name, field, text in (
            ("noetl_consumer_pending_messages", "num_pending", "Messages not yet delivered (lag)."),
            ("noetl_consumer_ack_pending_messages", "num_ack_pending", "Delivered, not yet acked."),
            ("noetl_consumer_redelivered_messages", "num_redelivered", "Messages delivered more "
             "than once.")):
        lines += family(name, "gauge", text, [
            sample(name, {"stream": c.stream_name, "consumer": c.name}, int(getattr(c, field) or 0))
            for c in consumers])
    streams = [await ctx.bus.js.stream_info(s.name) for s in ctx.bus.topology.streams]
    lines += family("noetl_stream_messages", "gauge", "Messages stored per stream.",
                    [sample("noetl_stream_messages", {"stream": s.config.name or ""},
                            int(s.state.messages)) for s in streams])
    lines += _process_lines(await live_processes(ctx.bus))
    hist_lines: list[str] = []
    for outcome, histogram in sorted(ctx.metrics.step_seconds.items()):
        hist_lines += histogram.lines("noetl_step_duration_seconds", {"outcome": outcome})
    lines += family("noetl_step_duration_seconds", "histogram", "Step durations seen by this API "
                    "process since it started (step.done / step.failed duration_ms).", hist_lines)
    return web.Response(body=("\n".join(lines) + "\n").encode(),
                        headers={"Content-Type": "text/plain; version=0.0.4; charset=utf-8"})


ENDPOINTS = [
    Endpoint("GET", "/health", health, "NATS and JetStream reachability and consumer lag "
             "(no authentication)", None, "ops", response=Health, errors=(503,)),
    Endpoint("GET", "/metrics", metrics, "Prometheus metrics (text format 0.0.4)", "read", "ops",
             produces="text/plain"),
]


def _process_lines(processes: list[dict[str, Any]]) -> list[str]:
    """Live processes by role and pool, and each worker's heartbeat age and running commands."""
    now = time.time()
    counts: Counter[tuple[str, str]] = Counter(
        (str(p.get("role", "")), str(p.get("pool", ""))) for p in processes)
    workers = [p for p in processes if p.get("role") == "worker"]
    out = family("noetl_processes", "gauge", "Live processes (heartbeat entries in KV "
                 "noetl_runtime) by role and pool.",
                 [sample("noetl_processes", {"role": r, "pool": pool}, n)
                  for (r, pool), n in sorted(counts.items())])
    out += family("noetl_worker_heartbeat_age_seconds", "gauge", "Seconds since each worker's "
                  "last heartbeat (written every 10 s; the entry expires after 60 s).",
                  [sample("noetl_worker_heartbeat_age_seconds",
                          {"pool": str(w.get("pool")), "worker": str(w.get("instance"))},
                          round(max(0.0, now - float(w.get("heartbeat_at") or now)), 3))
                   for w in workers])
    out += family("noetl_worker_running_commands", "gauge", "Commands each worker is running.",
                  [sample("noetl_worker_running_commands",
                          {"pool": str(w.get("pool")), "worker": str(w.get("instance"))},
                          int(w.get("running") or 0))
                   for w in workers])
    return out
