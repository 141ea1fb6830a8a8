"""`vars:` values of executions, from KV `noetl_vars` (`<execution_id>.<name>`).

The bucket is a projection the server writes as executions run (`server/vars_store.py`). A PUT
or DELETE here changes that projection, which is what other readers of the API and of the bucket
see; it does not reach back into a running execution's own state.
"""

from __future__ import annotations

import enum
from typing import Literal

from aiohttp import web
from nats.js.errors import KeyNotFoundError

from noetl_stream import jsonutil
from noetl_stream.api.context import ApiContext, api_context
from noetl_stream.api.endpoints import Endpoint, json_response, read_body
from noetl_stream.api.errors import not_found
from noetl_stream.api.execution_lookup import check_execution_id, load_state
from noetl_stream.api.models import Deleted, SkippedRecord, VarPut, VarsDoc, VarValue
from noetl_stream.jsonutil import JsonObject, JsonValue
from noetl_stream.server.vars_store import VARS_BUCKET, vars_key
from noetl_stream.state.kv_keys import bucket_keys
from noetl_stream.state.records import Skips, read_each


class _Missing(enum.Enum):
    """No value: the var was never set or is deleted."""

    MISSING = enum.auto()


_MISSING = _Missing.MISSING


async def _read(ctx: ApiContext, key: str) -> JsonValue | Literal[_Missing.MISSING]:
    try:
        entry = await ctx.vars.get(key)
    except KeyNotFoundError:  # KeyDeletedError too
        return _MISSING
    if not entry.value:
        return _MISSING
    value: JsonValue = jsonutil.loads(entry.value)
    return value


async def _known(ctx: ApiContext, execution_id: str) -> None:
    if await load_state(ctx, check_execution_id(execution_id)) is None:
        raise not_found(f'execution "{execution_id}"')


def _key(execution_id: str, name: str) -> str:
    key = vars_key(check_execution_id(execution_id), name)
    if key is None:
        raise not_found(f'var "{name}"')  # a name no var can have
    return key


async def get_vars(request: web.Request) -> web.StreamResponse:
    ctx = api_context(request)
    execution_id = request.match_info["execution_id"]
    await _known(ctx, execution_id)
    values: JsonObject = {}
    skips = Skips("var")

    async def read(key: str) -> str | None:
        value = await _read(ctx, key)
        if value is not _MISSING:
            values[key.split(".", 1)[1]] = value
        return key

    await read_each(await bucket_keys(ctx.bus.js, VARS_BUCKET, f"{execution_id}.>"), read, skips)
    return json_response(VarsDoc(execution_id=execution_id, vars=values, skipped=[
        SkippedRecord(key=s.key, reason=s.reason) for s in skips.items]))


async def get_var(request: web.Request) -> web.StreamResponse:
    ctx = api_context(request)
    execution_id, name = request.match_info["execution_id"], request.match_info["name"]
    value = await _read(ctx, _key(execution_id, name))
    if value is _MISSING:
        raise not_found(f'var "{name}" of execution "{execution_id}"')
    return json_response(VarValue(execution_id=execution_id, name=name, value=value))


async def put_var(request: web.Request) -> web.StreamResponse:
    ctx = api_context(request)
    execution_id, name = request.match_info["execution_id"], request.match_info["name"]
    key = _key(execution_id, name)
    body = await read_body(request, VarPut)
    await _known(ctx, execution_id)
    await ctx.vars.put(key, jsonutil.dumps(body.value))
    return json_response(VarValue(execution_id=execution_id, name=name, value=body.value))


async def delete_var(request: web.Request) -> web.StreamResponse:
    ctx = api_context(request)
    execution_id, name = request.match_info["execution_id"], request.match_info["name"]
    key = _key(execution_id, name)
    if await _read(ctx, key) is _MISSING:
        raise not_found(f'var "{name}" of execution "{execution_id}"')
    await ctx.vars.purge(key)
    return json_response(Deleted(deleted=name))


ENDPOINTS = [
    Endpoint("GET", "/api/vars/{execution_id}", get_vars, "Every var of an execution", "read",
             "vars", response=VarsDoc, errors=(404,)),
    Endpoint("GET", "/api/vars/{execution_id}/{name}", get_var, "One var", "read", "vars",
             response=VarValue, errors=(404,)),
    Endpoint("PUT", "/api/vars/{execution_id}/{name}", put_var, "Set one var (body "
             '{"value": ...})', "vars.write", "vars", body=VarPut, response=VarValue,
             errors=(404, 422)),
    Endpoint("DELETE", "/api/vars/{execution_id}/{name}", delete_var, "Remove one var",
             "vars.write", "vars", response=Deleted, errors=(404,)),
]
