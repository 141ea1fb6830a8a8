"""Result references (spec 002 §10, ARCHITECTURE §4): the shape and the payload limit. Pure.

A task result whose JSON is larger than the payload limit is stored in the NATS object store
`noetl_results` under its content hash; events, router state and commands carry in its place

    {"$ref": {"store": "noetl_results", "key": "<sha256 hex>", "size": <bytes>,
              "checksum": "sha256:<hex>"}}

A reference with `"encoding": "binary"` (and a `content_type`) points at raw bytes, such as an
http body read with `response_type: binary`; it is never inlined, since its bytes are not JSON.
"""

from __future__ import annotations

from collections.abc import Mapping

from noetl_stream.jsonutil import JsonObject, JsonValue

RESULTS_STORE = "noetl_results"
DEFAULT_MAX_PAYLOAD_BYTES = 256 * 1024
REF_KEY = "$ref"


def make_ref(key: str, size: int, **extra: JsonValue) -> JsonObject:
    """The reference to the object `key` (a sha256 hex digest) of `size` bytes."""
    return {REF_KEY: {"store": RESULTS_STORE, "key": key, "size": size,
                      "checksum": f"sha256:{key}", **extra}}


def ref_of(value: JsonValue) -> JsonObject | None:
    """The inner reference when `value` is exactly a result reference, else None."""
    if not isinstance(value, dict) or len(value) != 1:
        return None
    inner = value.get(REF_KEY)
    if isinstance(inner, dict) and inner.get("store") == RESULTS_STORE and \
            isinstance(inner.get("key"), str):
        return inner
    return None


def is_json_ref(value: JsonValue) -> bool:
    """A reference to a JSON value, which readers replace with the value itself."""
    inner = ref_of(value)
    return inner is not None and inner.get("encoding", "json") == "json"


def _limit_node(executor: Mapping[str, JsonValue]) -> JsonValue:
    node = executor.get("spec")
    for part in ("policy", "limits", "max_payload_bytes"):
        if not isinstance(node, dict):
            return None
        node = node.get(part)
    return node


def limit_problem(executor: Mapping[str, JsonValue]) -> str | None:
    """Why `executor.spec.policy.limits.max_payload_bytes` is unusable, or None."""
    value = _limit_node(executor)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1024:
        return f"must be a whole number of bytes, at least 1024 (got {value!r})"
    return None


def max_payload_bytes(executor: Mapping[str, JsonValue]) -> int:
    """The playbook's payload limit: `executor.spec.policy.limits.max_payload_bytes`, else 256 KiB."""
    value = _limit_node(executor)
    return value if limit_problem(executor) is None and isinstance(value, int) \
        else DEFAULT_MAX_PAYLOAD_BYTES
