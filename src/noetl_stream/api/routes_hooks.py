"""Webhook triggers: `POST /api/hooks/<name>` starts one execution of a `webhook:` trigger.

No bearer token: the request is authenticated by its signature (triggers/signature.py), the
HMAC-SHA256 of the body under the secret in the credential the trigger names. A missing or wrong
signature is 401 and starts nothing. The execution id is derived from the trigger and the
sender's delivery id (`X-Noetl-Delivery`), or without one from the body's SHA-256, so a
delivery sent again starts nothing new; the answer names the same execution.
"""

from __future__ import annotations

import time
from typing import TypedDict
from urllib.parse import parse_qsl

from aiohttp import web
from pydantic import BaseModel, ConfigDict

from noetl_stream import ids, jsonutil
from noetl_stream.api.context import api_context
from noetl_stream.api.endpoints import Endpoint, json_response
from noetl_stream.api.errors import ApiError, not_found
from noetl_stream.api.routes_triggers import trigger_name
from noetl_stream.isotime import iso_time
from noetl_stream.jsonutil import JsonObject, JsonValue
from noetl_stream.server.trigger_ops import publish_trigger_event
from noetl_stream.server.trigger_start import record_fired, request_execution
from noetl_stream.state import triggers as store
from noetl_stream.state.triggers import LastFire, TriggerRecord
from noetl_stream.triggers.signature import (
    DELIVERY_HEADER,
    SIGNATURE_HEADER,
    body_digest,
    secret_of,
    verify,
)

# Headers a payload template does not see: the signature proves the body, it is not data.
_HIDDEN_HEADERS = frozenset({"authorization", "cookie", SIGNATURE_HEADER.lower()})


class HookAccepted(BaseModel):
    model_config = ConfigDict(extra="forbid")
    trigger: str
    execution_id: str
    delivery: str


async def _webhook_record(request: web.Request, name: str) -> TriggerRecord:
    found = await store.read_record(api_context(request).bus.js, name)
    if found is None or found[0].trigger.spec.webhook is None:
        raise not_found(f'webhook trigger "{name}"')
    return found[0]


async def _check_signature(request: web.Request, record: TriggerRecord, body: bytes) -> None:
    assert record.trigger.spec.webhook is not None
    credential = record.trigger.spec.webhook.secret
    material = await api_context(request).credentials.get(credential)
    secret = secret_of(material.data) if material is not None else None
    if secret is None:
        raise ApiError(401, f'the signature cannot be checked: credential "{credential}" is '
                       "missing or holds no secret", code="bad_signature")
    header = record.trigger.spec.webhook.header or SIGNATURE_HEADER
    if not verify(secret, body, request.headers.get(header)):
        raise ApiError(401, f"missing or wrong {header} (sha256=<HMAC-SHA256 of the body, hex>)",
                       code="bad_signature")


def parsed_body(content_type: str, body: bytes) -> JsonValue:
    """The body as a payload template sees it: JSON parsed (when declared JSON, or when it
    parses without a declared type), a form as a mapping of its fields (a repeated field: the
    list of its values), anything else as text; None when empty.
    """
    if not body.strip():
        return None
    text = body.decode("utf-8", errors="replace")
    if content_type == "application/x-www-form-urlencoded":
        fields: JsonObject = {}
        for key, value in parse_qsl(text, keep_blank_values=True):
            held = fields.get(key)
            fields[key] = value if held is None else [*held, value] if isinstance(held, list) \
                else [held, value]
        return fields
    if content_type in ("application/json", "application/octet-stream") \
            or content_type.endswith("+json"):
        try:
            parsed: JsonValue = jsonutil.loads(body)
        except ValueError:
            return text
        return parsed
    return text


class WebhookContext(TypedDict):
    """What a webhook trigger's payload templates read as `webhook`."""

    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    body: JsonValue
    delivery: str


def webhook_context(request: web.Request, body: bytes, delivery: str) -> WebhookContext:
    data = parsed_body(request.content_type, body)
    headers = {k: v for k, v in request.headers.items() if k.lower() not in _HIDDEN_HEADERS}
    return {"method": request.method, "path": request.path, "query": dict(request.query),
            "headers": headers, "body": data, "delivery": delivery}


async def call_hook(request: web.Request) -> web.StreamResponse:
    bus = api_context(request).bus
    name = trigger_name(request)
    record = await _webhook_record(request, name)
    body = await request.read()
    await _check_signature(request, record, body)
    if record.state != "active":
        raise ApiError(409, f"trigger {name} is paused: nothing started")
    delivery = request.headers.get(DELIVERY_HEADER) or f"sha256:{body_digest(body)}"
    execution_id = ids.derived_execution_id("trigger-webhook", name, delivery)
    now = iso_time(time.time())
    hook = webhook_context(request, body, delivery)
    context = {"trigger": {"name": name, "playbook": record.trigger.spec.playbook,
                           "fire_time": now, "nominal_time": None}, "webhook": hook}
    base = hook["body"] if isinstance(hook["body"], dict) else {}
    refused = await request_execution(bus, record, execution_id, context, base)
    if refused is not None:
        await publish_trigger_event(bus, name, "failed", f"trg:{name}:failed:{execution_id}",
                                    reason=refused)
        raise ApiError(422, f"trigger {name}: {refused}")
    await record_fired(bus, name, LastFire(execution_id=execution_id, fired_at=now,
                                           message=f"webhook:{delivery}"))
    return json_response(HookAccepted(trigger=name, execution_id=execution_id,
                                      delivery=delivery), 202)


ENDPOINTS = [
    Endpoint("POST", "/api/hooks/{name}", call_hook, "Start one execution of a webhook trigger "
             f"(signed: {SIGNATURE_HEADER}: sha256=<HMAC-SHA256 of the body under the trigger's "
             "secret, hex>); any body type: JSON and forms are parsed, other text kept as is",
             None, "triggers", any_body=True, body_required=False, signed_body=True,
             response=HookAccepted, status=202, errors=(401, 404, 409, 422),
             headers=((SIGNATURE_HEADER, "sha256=<hex HMAC-SHA256 of the raw body>"),
                      (DELIVERY_HEADER, "the sender's delivery id: a delivery sent again "
                       "starts nothing new (the body's SHA-256 without it)"))),
]
