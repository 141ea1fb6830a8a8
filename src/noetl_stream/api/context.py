"""What handlers share: the bus, the stores they read and write, the authenticator.

Stores are opened once at app start-up (buckets are provisioned before the API starts), so a
handler never pays for opening a bucket.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta

from aiohttp import web
from nats.js.kv import KeyValue

from noetl_stream.api.auth import Authenticator
from noetl_stream.api.throttle import LoginThrottle
from noetl_stream.bus.connection import Bus
from noetl_stream.state.auth_cache import AuthCache
from noetl_stream.state.credentials import CredentialStore


@dataclass
class ApiContext:
    bus: Bus
    auth: Authenticator | None
    credentials: CredentialStore
    auth_cache: AuthCache
    executions: KeyValue
    catalog: KeyValue
    vars: KeyValue
    kinds: frozenset[str]  # tool kinds installed here: what a playbook may name
    login_throttle: LoginThrottle = field(default_factory=LoginThrottle)
    # How long POST /api/executions waits for the server to accept a request before answering
    # 202 "submitted" (the request is stored in the stream either way).
    accept_timeout: timedelta = timedelta(seconds=10)


CONTEXT = web.AppKey("noetl_api_context", ApiContext)


def api_context(request: web.Request) -> ApiContext:
    return request.app[CONTEXT]
