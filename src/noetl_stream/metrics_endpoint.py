"""`--metrics HOST:PORT`: a small HTTP listener without authentication for Prometheus (which
scrapes without a user session), apart from the API and its sessions.

A worker serves its own series (`/metrics`) and its own liveness (`/health`: the event loop
answers and a round trip to nats-server on its connection ends within 3 s). A server also serves
what JetStream and KV say at scrape time, and the cluster's `/health` (server/cluster_metrics.py,
api/routes_ops.py).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from aiohttp import web

from noetl_stream.bus.connection import Bus
from noetl_stream.http_site import serve_app
from noetl_stream.observe.metrics import CONTENT_TYPE, process_text

BUS = web.AppKey("noetl_metrics_bus", Bus)


async def _worker_metrics(request: web.Request) -> web.StreamResponse:
    # The process collector reads /proc files: in a thread, off the loop.
    body = await asyncio.to_thread(process_text)
    return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE})


async def _server_metrics(request: web.Request) -> web.StreamResponse:
    from noetl_stream.server.cluster_metrics import metrics_text

    body = await metrics_text(request.app[BUS])
    return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE})


WORKER_FLUSH_TIMEOUT_S = 3


async def _worker_health(request: web.Request) -> web.StreamResponse:
    # Answering at all shows the event loop runs; the flush shows the connection carries traffic
    # (a connection that looks open but passes nothing is what leaves a worker hung).
    bus = request.app[BUS]
    problems = []
    if not bus.nc.is_connected:
        problems.append("not connected to NATS")
    else:
        try:
            await bus.nc.flush(timeout=WORKER_FLUSH_TIMEOUT_S)
        except Exception as exc:  # any failure of the round trip is the answer, not an error
            problems.append(f"no round trip to NATS within {WORKER_FLUSH_TIMEOUT_S} s "
                            f"({type(exc).__name__})")
    body = {"status": "degraded", "problems": problems} if problems else {"status": "ok"}
    return web.json_response(body, status=503 if problems else 200)


async def _health(request: web.Request) -> web.StreamResponse:
    from noetl_stream.api.routes_ops import health_report

    report = await health_report(request.app[BUS])
    return web.json_response(report.model_dump(mode="json"),
                             status=200 if report.status == "ok" else 503)


@contextlib.asynccontextmanager
async def serve_metrics(host: str, port: int, *, bus: Bus,
                        cluster: bool) -> AsyncIterator[str]:
    """Serve /metrics and /health on host:port: with `cluster`, the JetStream series and the
    cluster's health; without, the process's own series and its liveness.
    """
    app = web.Application()
    app[BUS] = bus
    app.router.add_get("/metrics", _server_metrics if cluster else _worker_metrics)
    app.router.add_get("/health", _health if cluster else _worker_health)
    async with serve_app(app, host, port, what="metrics") as url:
        yield url
