"""Resolving `keychain:` declarations on the worker, through the auth cache (spec 002 §2.1).

A command carries declarations only (dsl/keychain.py). Each entry but `static` is resolved once
per execution: the material goes into KV `noetl_auth_cache` under `keychain.<name>` with
execution scope (or global scope with `cache: global`), sealed, with a TTL; later commands of the
execution, on any worker, read it from there. An oauth2 token lives until its `expires_in` minus
a margin, then the next reader fetches a new one.

Invariants: the material never leaves this process except sealed in the auth cache; the secret
values are handed back so the worker masks them in every event it publishes; error messages name
the entry and what went wrong, never a value.
"""

from __future__ import annotations

import asyncio
import base64
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta

import aiohttp
from nats.js import JetStreamContext

from noetl_stream import jsonutil
from noetl_stream.credentials import Credential
from noetl_stream.dsl import templating
from noetl_stream.errors import CredentialError, KeychainError, TemplateError, ToolError
from noetl_stream.jsonutil import JsonObject, JsonValue
from noetl_stream.state.auth_cache import DEFAULT_TTL, AuthCache
from noetl_stream.state.credentials import PUBLIC_FIELDS
from noetl_stream.state.crypto import SecretBox
from noetl_stream.tools.base import CredentialResolver
from noetl_stream.tools.secrets import is_worker_setting, worker_setting_refusal
from noetl_stream.worker.credential_guard import CredentialGuard

CACHE_PREFIX = "keychain."
MAX_REFRESH_MARGIN_S = 30.0
TOKEN_TIMEOUT_S = 30.0
# Fields of resolved material that say how to use it rather than being secret.
_NOT_SECRET = frozenset({"type", "token_type", "expires_at", "expires_in", "scope"})


@dataclass
class Resolved:
    """Resolved entries by name (what templates read as `keychain`) and the secret values."""

    values: dict[str, JsonObject] = field(default_factory=dict)
    secrets: set[str] = field(default_factory=set)


def refresh_margin_s(expires_in: float) -> float:
    """How long before its expiry a token is refreshed: a tenth of its life, at most 30 s."""
    return min(MAX_REFRESH_MARGIN_S, expires_in / 10)


class KeychainResolver:
    """Resolves one command's declarations; shared by every command of a worker process."""

    def __init__(self, js: JetStreamContext, box: SecretBox, credentials: CredentialResolver | None, *,
                 guard: CredentialGuard | None = None) -> None:
        self.js = js
        self.box = box
        self.credentials = credentials
        self.guard = guard
        self._cache: AuthCache | None = None
        self._session: aiohttp.ClientSession | None = None
        self._locks: dict[str, asyncio.Lock] = {}

    async def resolve(self, declarations: Sequence[Mapping[str, JsonValue]],
                      context: Mapping[str, object], *, execution_id: str) -> Resolved:
        """Every declaration in order; a later entry's templates may read earlier ones."""
        out = Resolved()
        for decl in declarations:
            name, kind = str(decl["name"]), str(decl["kind"])
            raw = decl.get("config")
            config: JsonObject = dict(raw) if isinstance(raw, dict) else {}
            scope = None if config.get("cache") == "global" else execution_id
            if kind in ("credential", "oauth2") and config.get("credential"):
                # Before the auth cache: a cached entry is a use too, and a global one may have
                # been resolved for another playbook.
                await self._admit(name, config["credential"], {**context, "keychain": out.values})
            if kind == "static":
                out.values[name] = self._render(name, config, {**context, "keychain": out.values})
                continue
            data = await self._cached(name, kind, config, {**context, "keychain": out.values},
                                      scope, execution_id)
            out.values[name] = data
            public = PUBLIC_FIELDS.get(str(data.get("type")), frozenset()) | _NOT_SECRET
            out.secrets.update(str(v) for k, v in data.items()
                               if k not in public and v is not None and str(v))
        return out

    async def _cached(self, name: str, kind: str, config: JsonObject, context: Mapping[str, object],
                      scope: str | None, execution_id: str) -> JsonObject:
        cache = await self._auth_cache(name)
        key = f"{scope}:{name}"
        lock = self._locks.setdefault(key, asyncio.Lock())
        try:
            async with lock:
                # Under the lock, so iterations of one loop on this worker fetch a token once.
                hit = await cache.get(CACHE_PREFIX + name, execution_id=scope)
                if hit is not None:
                    return dict(hit.data)
                rendered = self._render(name, config, context)
                data, ttl = await self._material(name, kind, rendered, execution_id)
                await cache.put(Credential(name=CACHE_PREFIX + name, kind=kind, data=data),
                                execution_id=scope, ttl=ttl)
                return data
        except CredentialError as exc:
            if isinstance(exc, KeychainError):
                raise
            raise KeychainError(name, str(exc)) from None
        finally:
            if not lock.locked():
                self._locks.pop(key, None)

    async def _material(self, name: str, kind: str, config: JsonObject,
                        execution_id: str) -> tuple[JsonObject, timedelta]:
        if kind == "bearer":
            token = config.get("token")
            if not token:
                raise KeychainError(name, "token rendered empty")
            # `access_token` / `token_type` are the names NoETL's keychain gives a bearer entry.
            return {"token": str(token), "access_token": str(token), "token_type": "Bearer",
                    "type": "bearer"}, DEFAULT_TTL
        if kind == "env":
            return _from_env(name, config["env"]), DEFAULT_TTL
        if kind == "credential":
            credential = await self._credential(name, str(config["credential"]), execution_id)
            return {**credential.data, "type": credential.kind}, DEFAULT_TTL
        if kind == "oauth2":
            return await self._oauth2(name, config, execution_id)
        raise KeychainError(name, f'kind "{kind}" is not known to this worker')

    async def _admit(self, name: str, credential: JsonValue, context: Mapping[str, object]) -> None:
        if self.guard is None:
            return
        stored = self._render(name, {"credential": credential}, context)["credential"]
        try:
            await self.guard.admit(str(stored), via=f"keychain.{name}")
        except ToolError as exc:
            raise KeychainError(name, str(exc)) from None

    async def _credential(self, name: str, credential: str, execution_id: str) -> Credential:
        if self.credentials is None:
            raise KeychainError(name, "this worker has no credential store")
        try:
            return await self.credentials.resolve(credential, execution_id=execution_id)
        except ToolError as exc:
            raise KeychainError(name, str(exc)) from None

    async def _oauth2(self, name: str, config: JsonObject,
                      execution_id: str) -> tuple[JsonObject, timedelta]:
        fields = dict(config)
        if config.get("credential"):
            stored = await self._credential(name, str(config["credential"]), execution_id)
            fields = {**stored.data, **{k: v for k, v in config.items() if v is not None}}
        for required in ("token_url", "client_id", "client_secret"):
            if not fields.get(required):
                raise KeychainError(name, f'oauth2 needs "{required}" (in the entry or its '
                                          "credential)")
        url = str(fields["token_url"])
        form = {"grant_type": "client_credentials"}
        form.update({k: str(fields[k]) for k in ("scope", "audience") if fields.get(k)})
        headers = {"Accept": "application/json"}
        if fields.get("auth_method", "basic") == "post":
            form.update(client_id=str(fields["client_id"]), client_secret=str(fields["client_secret"]))
        else:
            pair = f"{fields['client_id']}:{fields['client_secret']}".encode()
            headers["Authorization"] = "Basic " + base64.b64encode(pair).decode("ascii")
        try:
            async with self._client().post(url, data=form, headers=headers) as resp:
                body = await resp.json(content_type=None)
                status = resp.status
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise KeychainError(name, f"token request to {url} failed: "
                                      f"{exc or type(exc).__name__}") from None
        except ValueError:
            raise KeychainError(name, f"token endpoint {url} did not answer with JSON") from None
        if status >= 400 or not isinstance(body, dict) or not body.get("access_token"):
            reason = ""
            if isinstance(body, dict) and body.get("error"):
                # OAuth error codes and descriptions (RFC 6749 §5.2) explain; they hold no secret.
                reason = f": {body['error']}"
                if body.get("error_description"):
                    reason += f" ({body['error_description']})"
            raise KeychainError(name, f"token endpoint {url} answered HTTP {status} without an "
                                      f"access token{reason}")
        try:
            expires_in = float(body.get("expires_in") or DEFAULT_TTL.total_seconds())
        except (TypeError, ValueError):
            expires_in = DEFAULT_TTL.total_seconds()
        life = max(expires_in - refresh_margin_s(expires_in), 0.001)
        data = {"access_token": body["access_token"], "token": body["access_token"],
                "token_type": body.get("token_type") or "Bearer",
                "expires_at": time.time() + expires_in, "type": "bearer"}
        return data, timedelta(seconds=life)

    def _render(self, name: str, config: JsonObject, context: Mapping[str, object]) -> JsonObject:
        try:
            rendered = templating.render(config, context, field=f"keychain.{name}")
        except TemplateError as exc:
            raise KeychainError(name, str(exc)) from None
        return dict(jsonutil.to_plain(rendered))  # sent and cached as JSON

    async def _auth_cache(self, name: str) -> AuthCache:
        if self._cache is None:
            try:
                self._cache = await AuthCache.open(self.js, self.box)
            except CredentialError as exc:
                raise KeychainError(name, str(exc)) from None
        return self._cache

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(total=TOKEN_TIMEOUT_S))
        return self._session

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()


def _from_env(name: str, spec: JsonValue) -> JsonObject:
    """`env: VAR` gives `{value}`; `env: {field: VAR}` gives one field per variable."""
    if not isinstance(spec, (str, dict)):
        raise KeychainError(name, 'needs "env": a variable name, or a mapping of field -> variable')
    wanted: JsonObject = {"value": spec} if isinstance(spec, str) else spec
    out: JsonObject = {}
    for fld, var in wanted.items():
        if is_worker_setting(str(var)):
            raise KeychainError(name, worker_setting_refusal(str(var)))
        value = os.environ.get(str(var))
        if value is None:
            raise KeychainError(name, f'environment variable "{var}" is not set on this worker')
        out[fld] = value
    return out
