"""The UI's pages and assets. Every page is the same shell around one static fragment and one
script; none carries data, so they need no token (the scripts send it with each API call).

Pages live beside the JSON API, which is all under /api/ (plus /health and /metrics), so no
path answers both: `/` lists executions, `/executions/{id}` shows one, `/catalog` the catalog,
`/login` logs in, and `/ui/<file>` serves the assets.
"""

from __future__ import annotations

import asyncio
from functools import cache
from importlib import resources
from string import Template

from aiohttp import web

from noetl_stream.api.endpoints import Endpoint
from noetl_stream.api.errors import not_found

ASSET_TYPES = {".css": "text/css", ".js": "text/javascript", ".svg": "image/svg+xml"}
# Only what ships with the package, from the package: no CDN, no inline script (the policy
# below forbids both, so a value shown on a page can never run as code).
SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; script-src 'self'; style-src 'self'; "
                               "img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'; "
                               "base-uri 'none'; form-action 'self'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-cache",
}


@cache
def _static(name: str) -> str:
    return (resources.files("noetl_stream.api.ui") / "static" / name).read_text(encoding="utf-8")


@cache
def asset_names() -> frozenset[str]:
    folder = resources.files("noetl_stream.api.ui") / "static"
    return frozenset(p.name for p in folder.iterdir() if p.name.endswith(tuple(ASSET_TYPES)))


def render_page(page: str, title: str) -> str:
    """The shell with the page's fragment and script in it."""
    return Template(_static("shell.html")).substitute(
        title=title, page=page, body=_static(f"{page}.html"))


async def _page(page: str, title: str) -> web.Response:
    # The files are read on a page's first request (then cached): in a thread, off the loop.
    text = await asyncio.to_thread(render_page, page, title)
    return web.Response(text=text, content_type="text/html", charset="utf-8",
                        headers=SECURITY_HEADERS)


async def executions_page(request: web.Request) -> web.StreamResponse:
    return await _page("executions", "Executions")


async def execution_page(request: web.Request) -> web.StreamResponse:
    return await _page("execution", "Execution")


async def catalog_page(request: web.Request) -> web.StreamResponse:
    return await _page("catalog", "Catalog")


async def triggers_page(request: web.Request) -> web.StreamResponse:
    return await _page("triggers", "Triggers")


async def login_page(request: web.Request) -> web.StreamResponse:
    return await _page("login", "Log in")


async def asset(request: web.Request) -> web.StreamResponse:
    name = request.match_info["name"]
    if name not in await asyncio.to_thread(asset_names):
        raise not_found(f'UI asset "{name}"')
    kind = ASSET_TYPES["." + name.rsplit(".", 1)[-1]]
    return web.Response(text=await asyncio.to_thread(_static, name), content_type=kind,
                        charset="utf-8", headers=SECURITY_HEADERS)


def ui_endpoints() -> list[Endpoint]:
    """The pages and assets; not in the OpenAPI document, which describes the JSON API."""
    return [
        Endpoint("GET", "/", executions_page, "Executions (HTML)", None, "ui"),
        Endpoint("GET", "/executions/{execution_id}", execution_page, "One execution, live (HTML)",
                 None, "ui"),
        Endpoint("GET", "/catalog", catalog_page, "The catalog (HTML)", None, "ui"),
        Endpoint("GET", "/triggers", triggers_page, "Triggers (HTML)", None, "ui"),
        Endpoint("GET", "/login", login_page, "Log in (HTML)", None, "ui"),
        Endpoint("GET", "/ui/{name}", asset, "A UI asset", None, "ui"),
    ]
