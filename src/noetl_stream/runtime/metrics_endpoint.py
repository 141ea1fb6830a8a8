"""`--metrics HOST:PORT`: a small HTTP listener without authentication for Prometheus (which
scrapes without a user session), apart from the API and its sessions.

A worker serves its own series (`/metrics`). A server also serves what JetStream and KV say at
scrape time, and `/health` (runtime/cluster_metrics.py, api/routes_ops.py).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from aiohttp import web

from noetl_stream.http_site import serve_app
from noetl_stream.observe.metrics import CONTENT_TYPE, process_text
from noetl_stream.runtime.connection import Bus

BUS = web.AppKey("noetl_metrics_bus", Bus)


async def _worker_metrics(request: web.Request) -> web.StreamResponse:
    # The process collector reads /proc files: in a thread, off the loop.
    body = await asyncio.to_thread(process_text)
    return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE})


async def _server_metrics(request: web.Request) -> web.StreamResponse:
    from noetl_stream.runtime.cluster_metrics import metrics_text

    body = await metrics_text(request.app[BUS])
    return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE})


async def _health(request: web.Request) -> web.StreamResponse:
    from noetl_stream.api.routes_ops import health_report

    report = await health_report(request.app[BUS])
    return web.json_response(report.model_dump(mode="json"),
                             status=200 if report.status == "ok" else 503)


@contextlib.asynccontextmanager
async def serve_metrics(host: str, port: int, *, bus: Bus,
                        cluster: bool) -> AsyncIterator[str]:
    """Serve /metrics (and, with `cluster`, the JetStream series and /health) on host:port."""
    app = web.Application()
    app[BUS] = bus
    app.router.add_get("/metrics", _server_metrics if cluster else _worker_metrics)
    if cluster:
        app.router.add_get("/health", _health)
    async with serve_app(app, host, port, what="metrics") as url:
        yield url
