"""Webhook signatures: HMAC-SHA256 of the raw request body under the trigger's secret, sent as
`X-Noetl-Signature: sha256=<lowercase hex digest>`. Pure: no I/O.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping

from noetl_stream.jsonutil import JsonValue

SIGNATURE_HEADER = "X-Noetl-Signature"
DELIVERY_HEADER = "X-Noetl-Delivery"
_SCHEME = "sha256="
# The material field that holds the secret, by credential kind (`generic`: its `secret`).
_SECRET_FIELDS = ("secret", "token", "value", "key", "password")


def sign(secret: str, body: bytes) -> str:
    """The header value a sender computes."""
    return _SCHEME + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def verify(secret: str, body: bytes, header: str | None) -> bool:
    """Whether `header` is the signature of `body` (`sha256=<hex>`, or the bare hex digest as
    some senders write it), compared in constant time.
    """
    if not header:
        return False
    given = header.strip()
    given = given if given.startswith(_SCHEME) else _SCHEME + given
    return hmac.compare_digest(sign(secret, body).encode(), given.encode())


def secret_of(material: Mapping[str, JsonValue]) -> str | None:
    """The signing secret in a credential's material: `secret` (generic), `token` (bearer),
    `value` (api_key), `key` or `password` (basic), the first one present.
    """
    for key in _SECRET_FIELDS:
        value = material.get(key)
        if isinstance(value, str) and value:
            return value
    return None


def body_digest(body: bytes) -> str:
    return hashlib.sha256(body).hexdigest()
