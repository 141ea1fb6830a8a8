"""Credentials over HTTP, on the same encrypted store as `noetl-stream credential`.

Material leaves the server in clear only for `include_data=true`, which needs the
`credentials.data` permission (roles admin and worker) and is audited: every such read publishes
a `credential.read` event on `<prefix>.events.audit.credential.read` in the events stream, naming
who read what (never the material).
"""

from __future__ import annotations

import time

from aiohttp import web

from noetl_stream import jsonutil
from noetl_stream.api.auth import Principal, principal, require
from noetl_stream.api.context import ApiContext, api_context
from noetl_stream.api.endpoints import Endpoint, json_response, read_body, read_query
from noetl_stream.api.errors import not_found
from noetl_stream.api.models import (
    CredentialCreate,
    CredentialDetail,
    CredentialList,
    CredentialQuery,
    Deleted,
    SkippedRecord,
)
from noetl_stream.state.credentials import CredentialInfo, mask
from noetl_stream.state.records import Skips

AUDIT_EVENT = "credential.read"


def audit_subject(ctx: ApiContext) -> str:
    return f"{ctx.bus.topology.prefix}.events.audit.{AUDIT_EVENT}"


async def _audit(ctx: ApiContext, who: Principal, name: str, kind: str,
                 execution_id: str | None, client: str | None) -> None:
    body = {"event_type": AUDIT_EVENT, "timestamp": time.time(), "credential": name, "kind": kind,
            "user": who.user, "via": who.via, "roles": list(who.roles),
            "execution_id": execution_id, "client": client}
    # Stored before the material is sent: a read that cannot be audited does not happen.
    await ctx.bus.js.publish(audit_subject(ctx), jsonutil.dumps(body))


async def create_credential(request: web.Request) -> web.StreamResponse:
    ctx = api_context(request)
    body = await read_body(request, CredentialCreate)
    info = await ctx.credentials.set(body.name, body.kind, body.data, description=body.description,
                                     tags=body.tags)
    await ctx.auth_cache.invalidate(body.name)  # resolvers must not serve the old material
    return json_response(info, 201)


async def list_credentials(request: web.Request) -> web.StreamResponse:
    ctx = api_context(request)
    skips = Skips("credential")
    items = await ctx.credentials.list(skips)
    return json_response(CredentialList(items=items, skipped=[
        SkippedRecord(key=s.key, reason=s.reason) for s in skips.items]))


async def get_credential(request: web.Request) -> web.StreamResponse:
    ctx = api_context(request)
    name = request.match_info["name"]
    query = read_query(request, CredentialQuery)
    who = require(request, "credentials.data") if query.include_data else principal(request)
    info: CredentialInfo | None = await ctx.credentials.info(name)
    material = await ctx.credentials.get(name) if info is not None else None
    if info is None or material is None:
        raise not_found(f'credential "{name}"')
    if query.include_data:
        await _audit(ctx, who, name, material.kind, query.execution_id, request.remote)
        data = material.data
    else:
        data = mask(material.kind, material.data)
    return json_response(CredentialDetail(**info.model_dump(), data=data))


async def delete_credential(request: web.Request) -> web.StreamResponse:
    ctx = api_context(request)
    name = request.match_info["name"]
    if not await ctx.credentials.delete(name):
        raise not_found(f'credential "{name}"')
    await ctx.auth_cache.invalidate(name)
    return json_response(Deleted(deleted=name))


ENDPOINTS = [
    Endpoint("POST", "/api/credentials", create_credential, "Create or replace a credential "
             "(encrypted at rest)", "credentials.write", "credentials", body=CredentialCreate,
             response=CredentialInfo, status=201, errors=(422,)),
    Endpoint("GET", "/api/credentials", list_credentials, "Credentials without their material",
             "read", "credentials", response=CredentialList),
    Endpoint("GET", "/api/credentials/{name}", get_credential, "One credential, its material "
             "masked unless include_data=true (admin, worker; audited)", "read", "credentials",
             query=CredentialQuery, response=CredentialDetail, errors=(403, 404, 422)),
    Endpoint("DELETE", "/api/credentials/{name}", delete_credential, "Delete a credential and its "
             "cached resolutions", "credentials.write", "credentials", response=Deleted,
             errors=(404, 422)),
]
