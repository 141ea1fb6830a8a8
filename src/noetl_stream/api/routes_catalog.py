"""The playbook catalog over HTTP: register, list, read and remove playbooks by `metadata.path`.

The catalog is KV `noetl_catalog`, laid out by `state/catalog.py` (the same keys the CLI's
`register` writes). Texts stay under their content key when a path or version is removed, so a
running execution never loses its playbook.
"""

from __future__ import annotations

import re

from aiohttp import web
from nats.js.errors import KeyNotFoundError

from noetl_stream import ids
from noetl_stream.api.context import ApiContext, api_context
from noetl_stream.api.endpoints import Endpoint, json_response, read_body, read_query
from noetl_stream.api.errors import not_found
from noetl_stream.api.models import (
    CatalogDeleted,
    CatalogList,
    CatalogPath,
    CatalogPlaybook,
    CatalogQuery,
    CatalogRegister,
    CatalogRegistered,
    SkippedRecord,
)
from noetl_stream.api.request_guard import YAML_TYPES
from noetl_stream.dsl import parse_playbook
from noetl_stream.dsl.composition import PlaybookFile, file_references, may_be_catalog_path
from noetl_stream.dsl.models import Playbook
from noetl_stream.dsl.subscription import STORED, Subscription, subscription_in
from noetl_stream.errors import Issue, PlaybookError
from noetl_stream.state.catalog import (
    CATALOG_BUCKET,
    list_paths,
    path_key,
    register_files,
    register_path,
    register_subscription,
    split_path_key,
)
from noetl_stream.state.kv_keys import bucket_keys
from noetl_stream.state.records import Skips

PLAYBOOK_ID = re.compile(r"pb_[0-9a-f]{32}")  # a content key (ids.playbook_key)
REQUEST_FILE = "<request>"


async def read_text(ctx: ApiContext, key: str) -> str | None:
    try:
        entry = await ctx.catalog.get(key)
    except KeyNotFoundError:
        return None
    return bytes(entry.value).decode() if entry.value else None


async def _present(ctx: ApiContext, key: str) -> bool:
    try:
        return bool((await ctx.catalog.get(key)).value)
    except KeyNotFoundError:
        return False


def parse(ctx: ApiContext, text: str, *, strict: bool = False) -> tuple[Playbook, list[str]]:
    """Validate `text`; PlaybookError (422 with every issue) when it cannot run."""
    result = parse_playbook(text, REQUEST_FILE, kinds=ctx.kinds, strict=strict)
    return result.playbook, [str(w) for w in result.warnings]


async def register(request: web.Request) -> web.StreamResponse:
    ctx = api_context(request)
    if request.content_type in YAML_TYPES:
        body = CatalogRegister(content=await request.text())
    else:
        body = await read_body(request, CatalogRegister)
    subscription = subscription_in(body.content, REQUEST_FILE)
    if subscription is not None:
        return await _register_subscription(ctx, body.content, subscription)
    playbook, warnings = parse(ctx, body.content, strict=body.strict)
    if not playbook.path:
        raise PlaybookError([Issue(REQUEST_FILE, None, "metadata.path is required to register a "
                                   "playbook", field="metadata.path")])
    for step, task, line, child in file_references(playbook):
        if may_be_catalog_path(child):
            continue  # a catalog path unless a file of that name is registered with it
        warnings.append(str(Issue(REQUEST_FILE, line, f'task "{task}" names the file "{child}", '
                                  "which HTTP registration cannot read; register the child by "
                                  "catalog path and name that path instead", step=step,
                                  field="tool.path", severity="warning")))
    key = ids.playbook_key(body.content)
    await register_files(ctx.bus.js, [PlaybookFile(REQUEST_FILE, body.content, key, playbook)])
    await register_path(ctx.bus.js, playbook, key)
    return json_response(CatalogRegistered(path=playbook.path, version=playbook.version,
                                           playbook_id=key, warnings=warnings), 201)


async def _register_subscription(ctx: ApiContext, text: str,
                                 subscription: Subscription) -> web.StreamResponse:
    if not subscription.path:
        raise PlaybookError([Issue(REQUEST_FILE, None, "metadata.path is required to register a "
                                   "Subscription", field="metadata.path")])
    key = await register_subscription(ctx.bus.js, text, subscription)
    return json_response(CatalogRegistered(path=subscription.path, version=subscription.version,
                                           playbook_id=key,
                                           warnings=[f"a Subscription: {STORED}"]), 201)


async def _describe(ctx: ApiContext, playbook_id: str) -> tuple[str | None, str | None]:
    text = await read_text(ctx, playbook_id)
    if text is None:
        return None, None
    try:
        playbook = parse(ctx, text)[0]
    except PlaybookError:  # registered under other installed kinds; still listed by its key
        return None, None
    return playbook.path, playbook.version


async def list_catalog(request: web.Request) -> web.StreamResponse:
    ctx = api_context(request)
    skips = Skips("catalog entry")
    paths = await list_paths(ctx.bus.js, lambda key: _describe(ctx, key), skips)
    items = [CatalogPath(path=p.path, latest=p.latest, versions=p.versions) for p in paths]
    return json_response(CatalogList(items=items, skipped=[
        SkippedRecord(key=s.key, reason=s.reason) for s in skips.items]))


async def get_playbook(request: web.Request) -> web.StreamResponse:
    ctx = api_context(request)
    path = request.match_info["path"]
    query = read_query(request, CatalogQuery)
    pointer = await read_text(ctx, path_key(path, query.version))
    text = await read_text(ctx, pointer) if pointer else None
    if pointer is None or text is None:
        shown = f'"{path}"' + (f' version "{query.version}"' if query.version else "")
        raise not_found(f"playbook {shown}")
    document: Playbook | Subscription | None = subscription_in(text, REQUEST_FILE)
    if document is None:
        document, _ = parse(ctx, text)
    return json_response(CatalogPlaybook(path=document.path or path, version=document.version,
                                         playbook_id=pointer, name=document.name, content=text))


async def delete_playbook(request: web.Request) -> web.StreamResponse:
    ctx = api_context(request)
    path = request.match_info["path"]
    query = read_query(request, CatalogQuery)
    latest_key = path_key(path)
    if query.version is not None and query.version != "latest":
        version_key = path_key(path, query.version)
        pointer = await read_text(ctx, version_key)
        if pointer is None:
            raise not_found(f'playbook "{path}" version "{query.version}"')
        await ctx.catalog.purge(version_key)
        removed = [query.version]
        # `latest` must not keep naming a version that is gone.
        if await read_text(ctx, latest_key) == pointer:
            await ctx.catalog.purge(latest_key)
            removed.append("latest")
        return json_response(CatalogDeleted(path=path, removed=removed))
    base = latest_key.removesuffix(".latest")
    # Present, whatever they hold: an entry that does not decode is removed with the others.
    keys = [k for k in await bucket_keys(ctx.bus.js, CATALOG_BUCKET, base + ".>")
            if await _present(ctx, k)]
    if not keys:
        raise not_found(f'playbook "{path}"')
    for key in keys:
        await ctx.catalog.purge(key)
    removed = sorted(v for k in keys if (s := split_path_key(k)) for v in [s[1]])
    return json_response(CatalogDeleted(path=path, removed=removed))


ENDPOINTS = [
    Endpoint("POST", "/api/catalog", register, "Validate a playbook and register it by "
             "metadata.path (and metadata.version)", "catalog.write", "catalog",
             body=CatalogRegister, response=CatalogRegistered, status=201, errors=(422,),
             raw_body="text/yaml"),
    Endpoint("GET", "/api/catalog", list_catalog, "Registered paths with their versions", "read",
             "catalog", response=CatalogList),
    Endpoint("GET", "/api/catalog/{path}", get_playbook, "A registered playbook's text (latest "
             "unless ?version=)", "read", "catalog", query=CatalogQuery, response=CatalogPlaybook,
             errors=(404,), route_path="/api/catalog/{path:.+}"),
    Endpoint("DELETE", "/api/catalog/{path}", delete_playbook, "Unregister a path, or one version "
             "of it", "catalog.write", "catalog", query=CatalogQuery, response=CatalogDeleted,
             errors=(404,), route_path="/api/catalog/{path:.+}"),
]
