"""The OpenAPI 3.1 document of the HTTP API, built from the route table and its pydantic models.

Served at GET /api/openapi.json and checked in as `schemas/openapi.json` (written by `python -m
noetl_stream.schemas`; a unit test keeps the file in sync). Nothing here is written by hand per
endpoint, so the document cannot drift from the routes.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

from pydantic import BaseModel
from pydantic.json_schema import JsonSchemaMode, JsonSchemaValue, models_json_schema

from noetl_stream import __version__
from noetl_stream.api.endpoints import Endpoint
from noetl_stream.api.models import ErrorReply
from noetl_stream.jsonutil import JsonObject, JsonValue

REF = "#/components/schemas/{model}"
_PATH_PARAM = re.compile(r"\{([A-Za-z_]+)\}")


# The reference to a model's schema in the document, for validation (a body) or serialization.
_Ref = Callable[[type[BaseModel], JsonSchemaMode], JsonSchemaValue]


def _non_null(schema: JsonObject) -> JsonObject:
    """A query parameter is absent rather than null: drop the null branch of an optional."""
    variants = schema.get("anyOf")
    if isinstance(variants, list):
        kept = [v for v in variants if v != {"type": "null"}]
        if len(kept) == 1 and isinstance(kept[0], dict):
            rest = {k: v for k, v in schema.items() if k != "anyOf"}
            return {**rest, **kept[0]}
    return schema


def _query_parameters(model: type[BaseModel]) -> list[JsonObject]:
    schema = model.model_json_schema()
    required = set(schema.get("required", []))
    out = []
    for name, prop in schema.get("properties", {}).items():
        prop = _non_null(dict(prop))
        prop.pop("title", None)
        if prop.get("default", "") is None:
            prop.pop("default")
        description = prop.pop("description", None)
        param: JsonObject = {"name": name, "in": "query", "required": name in required,
                                 "schema": prop}
        if description:
            param["description"] = description
        out.append(param)
    return out


def _operation(ep: Endpoint, ref: _Ref) -> JsonObject:
    op: JsonObject = {"operationId": ep.operation_id, "summary": ep.summary, "tags": [ep.tag]}
    params: list[JsonValue] = [
        {"name": name, "in": "path", "required": True, "schema": {"type": "string", "minLength": 1}}
        for name in _PATH_PARAM.findall(ep.path)]
    if ep.query is not None:
        params += _query_parameters(ep.query)
    params += [{"name": name, "in": "header", "required": False, "description": text,
                "schema": {"type": "string"}} for name, text in ep.headers]
    if params:
        op["parameters"] = params
    if ep.body is not None:
        content: JsonObject = {"application/json": {"schema": ref(ep.body, "validation")}}
        if ep.raw_body:
            content[ep.raw_body] = {"schema": {"type": "string"}}
        op["requestBody"] = {"required": ep.body_required, "content": content}
    elif ep.any_body:
        op["requestBody"] = {"required": False, "content": {"application/json": {"schema": {}}}}
    ok: JsonObject = {"description": "success"}
    if ep.response is not None:
        ok["content"] = {ep.produces: {"schema": ref(ep.response, "serialization")}}
    elif ep.produces != "application/json":
        ok["content"] = {ep.produces: {"schema": {"type": "string"}}}
    responses: JsonObject = {str(ep.status): ok}
    error: JsonObject = {"content": {"application/json": {"schema": ref(ErrorReply, "serialization")}}}
    codes = set(ep.errors) | ({401, 403} if ep.permission is not None else set())
    for code in sorted(codes):
        responses[str(code)] = {"description": _DESCRIPTIONS.get(code, "error"), **error}
    op["responses"] = responses
    if ep.permission is None:
        op["security"] = []
    else:
        op["x-permission"] = ep.permission
    return op


_DESCRIPTIONS = {401: "no valid bearer token", 403: "the caller's roles lack the permission",
                 404: "not found", 409: "conflicts with the current state", 413: "body too large",
                 422: "invalid request", 503: "NATS or JetStream unreachable"}


def build_openapi(endpoints: Sequence[Endpoint]) -> JsonObject:
    """The document for `endpoints`, deterministic (the same routes give the same text)."""
    wanted: list[tuple[type[BaseModel], JsonSchemaMode]] = [(ErrorReply, "serialization")]
    for ep in endpoints:
        if ep.body is not None:
            wanted.append((ep.body, "validation"))
        if ep.response is not None:
            wanted.append((ep.response, "serialization"))
    unique = list(dict.fromkeys(wanted))
    refs, defs = models_json_schema(unique, ref_template=REF)
    paths: dict[str, JsonObject] = {}
    for ep in endpoints:
        paths.setdefault(ep.path, {})[ep.method.lower()] = _operation(
            ep, lambda model, mode: refs[(model, mode)])
    return {
        "openapi": "3.1.0",
        "info": {"title": "noetl-stream API", "version": __version__,
                 "description": "Control plane of noetl-stream: catalog, executions, events, "
                                "credentials, vars, sessions. See docs/api.md."},
        "paths": {path: operations for path, operations in paths.items()},
        "components": {"schemas": defs.get("$defs", {}),
                       "securitySchemes": {"bearer": {
                           "type": "http", "scheme": "bearer",
                           "description": "A session token (POST /api/sessions) or an API key"}}},
        "security": [{"bearer": []}],
    }
