"""A real local HTTP service with the behaviours playbooks meet in the wild (aiohttp)."""

from __future__ import annotations

import asyncio
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

ITEMS_TOTAL = 10


@dataclass
class HttpService:
    """A local HTTP server with the behaviours playbooks meet in the wild.

    GET  /items?page=N&size=S  pages over ITEMS_TOTAL items; `next_page` is null on the last page
    GET  /posts?n=N            a JSON list of N posts {id, userId, title, body, meta: {lang}}
    GET  /records?page=N&size=S  the items as a body with its own `data` key: {data: [{id}],
                               paging: {page, next_page}, meta: {total}}
    ANY  /flaky/{key}?fail=N   503 for the first N calls per key, then 200 {key, calls}
    ANY  /echo                 {method, path, query, json, headers}; `echoed` keeps the headers
    ANY  /status/{code}/{key}?times=N  `code` (with Retry-After: 1 for 429) for the first N calls per
                               key (every call without `times`), then 200 {key, calls}
    ANY  /slow?s=S&key=K       answers {"slept": S} after S seconds (calls counted per key)
    POST /ledger               records {key: Idempotency-Key header, body}; GET /ledger lists them
    """

    url: str
    calls: Counter[str] = field(default_factory=Counter)
    ledger: list[dict[str, Any]] = field(default_factory=list)
    echoed: list[dict[str, str]] = field(default_factory=list)  # request headers /echo saw


def http_app(service: HttpService) -> web.Application:
    async def items(request: web.Request) -> web.Response:
        service.calls["items"] += 1
        page = int(request.query.get("page", "1"))
        size = int(request.query.get("size", "4"))
        start = (page - 1) * size
        chunk = [{"id": i} for i in range(start + 1, min(start + size, ITEMS_TOTAL) + 1)]
        more = start + size < ITEMS_TOTAL
        return web.json_response({"page": page, "items": chunk,
                                  "next_page": page + 1 if more else None})

    async def records(request: web.Request) -> web.Response:
        service.calls["records"] += 1
        page = int(request.query.get("page", "1"))
        size = int(request.query.get("size", "4"))
        start = (page - 1) * size
        chunk = [{"id": i} for i in range(start + 1, min(start + size, ITEMS_TOTAL) + 1)]
        more = start + size < ITEMS_TOTAL
        return web.json_response({"data": chunk, "meta": {"total": ITEMS_TOTAL},
                                  "paging": {"page": page, "next_page": page + 1 if more else None}})

    async def posts(request: web.Request) -> web.Response:
        service.calls["posts"] += 1
        count = int(request.query.get("n", "5"))
        return web.json_response([{"id": i, "userId": (i + 1) // 2, "title": f"post {i}",
                                   "body": f"text of post {i}", "meta": {"lang": "en"}}
                                  for i in range(1, count + 1)])

    async def flaky(request: web.Request) -> web.Response:
        key = request.match_info["key"]
        service.calls[key] += 1
        calls = service.calls[key]
        if calls <= int(request.query.get("fail", "0")):
            return web.json_response({"error": "unavailable", "calls": calls}, status=503)
        return web.json_response({"key": key, "calls": calls})

    async def status(request: web.Request) -> web.Response:
        key = request.match_info["key"]
        service.calls[key] += 1
        calls = service.calls[key]
        code = int(request.match_info["code"])
        times = request.query.get("times")
        if times is None or calls <= int(times):
            headers = {"Retry-After": "1"} if code == 429 else None
            return web.json_response({"error": code, "calls": calls}, status=code, headers=headers)
        return web.json_response({"key": key, "calls": calls})

    async def slow(request: web.Request) -> web.Response:
        service.calls[f"slow:{request.query.get('key', '')}"] += 1
        seconds = float(request.query.get("s", "1"))
        await asyncio.sleep(seconds)
        return web.json_response({"slept": seconds})

    async def echo(request: web.Request) -> web.Response:
        service.calls["echo"] += 1
        service.echoed.append(dict(request.headers))
        body = await request.json() if request.can_read_body else None
        return web.json_response({"method": request.method, "path": request.path,
                                  "query": dict(request.query), "json": body,
                                  "headers": dict(request.headers)})

    async def ledger_add(request: web.Request) -> web.Response:
        body = await request.json() if request.can_read_body else None
        service.ledger.append({"key": request.headers.get("Idempotency-Key"), "body": body})
        return web.json_response({"recorded": len(service.ledger)})

    async def ledger_list(request: web.Request) -> web.Response:
        return web.json_response(service.ledger)

    app = web.Application()
    app.router.add_get("/items", items)
    app.router.add_get("/posts", posts)
    app.router.add_get("/records", records)
    app.router.add_route("*", "/flaky/{key}", flaky)
    app.router.add_route("*", "/echo", echo)
    app.router.add_route("*", "/status/{code}/{key}", status)
    app.router.add_get("/slow", slow)
    app.router.add_post("/ledger", ledger_add)
    app.router.add_get("/ledger", ledger_list)
    return app
