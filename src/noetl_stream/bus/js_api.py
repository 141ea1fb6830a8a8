"""JetStream API requests that nats-py's JetStream context does not make (a consumer with a
priority group, a backup's raw stream reads), each answered with one JSON object.
"""

from __future__ import annotations

import json

from noetl_stream.bus.connection import API_PREFIX, Bus
from noetl_stream.errors import InfrastructureError
from noetl_stream.jsonutil import JsonObject, JsonValue


async def js_request(bus: Bus, subject: str, body: JsonObject | None = None, *,
                     timeout_s: float) -> JsonObject:
    """JetStream's answer to `<API_PREFIX>.<subject>` with `body`; an error answer is returned as
    it came (its `error` object), an answer that is no JSON object raises InfrastructureError.
    """
    reply = await bus.nc.request(f"{API_PREFIX}.{subject}", json.dumps(body).encode() if body else b"",
                                 timeout=timeout_s)
    answer: JsonValue = json.loads(reply.data)
    if not isinstance(answer, dict):
        raise InfrastructureError(f"JetStream answered {subject} with no JSON object")
    return answer
