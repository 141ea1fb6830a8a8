"""Resolved credential material in KV `noetl_auth_cache`, with a TTL per key (spec 000 §5.2).

Keys are `global.<name>` or `execution.<execution_id>.<name>` (scope `execution` when the reader
names an execution, so one execution's material is never served to another). Each entry keeps its
material encrypted, plus `expires_at`, `accessed_at` and `access_count`; every read bumps the
counters by a revision-checked update and retries on conflict, so concurrent readers never lose a
count.

Expiry is enforced twice: the entry is written with a per-message TTL (`Nats-TTL`; nats-py creates
KV streams with `allow_msg_ttl`), so the server drops it, and `expires_at` is checked on every read,
which also covers buckets created without per-message TTL and sub-second precision.
"""

from __future__ import annotations

import hashlib
import math
import time
from datetime import timedelta

from nats.js import JetStreamContext
from nats.js.api import Header
from nats.js.errors import APIError, BucketNotFoundError, KeyDeletedError, KeyNotFoundError
from nats.js.kv import KeyValue
from pydantic import ConfigDict

from noetl_stream import ids, jsonutil
from noetl_stream.credentials import Credential
from noetl_stream.errors import CredentialError, ToolError
from noetl_stream.formats import AUTH_CACHE
from noetl_stream.state.credentials import CredentialStore, check_name
from noetl_stream.state.crypto import SecretBox
from noetl_stream.state.versioned import Versioned

AUTH_CACHE_BUCKET = "noetl_auth_cache"
DEFAULT_TTL = timedelta(hours=1)
MAX_UPDATE_ATTEMPTS = 200
_WRONG_LAST_SEQUENCE = (10071, 10164)


class CacheEntry(Versioned):
    """One cached resolution, as stored (the material stays sealed in `data_encrypted`)."""

    model_config = ConfigDict(frozen=True)
    FORMAT = AUTH_CACHE

    cache_key: str
    credential_name: str
    credential_type: str
    cache_type: str = "secret"
    scope_type: str  # execution | global
    execution_id: str | None = None
    data_encrypted: str
    expires_at: float
    created_at: float
    accessed_at: float
    access_count: int = 0

    def expired(self, now: float) -> bool:
        return now >= self.expires_at


class _Conflict(Exception):
    """Someone else updated the key between our read and our write."""


class AuthCache:
    def __init__(self, js: JetStreamContext, kv: KeyValue, box: SecretBox, *, bucket: str,
                 ttl: timedelta = DEFAULT_TTL, server_ttl: bool = True) -> None:
        self.js = js
        self.kv = kv
        self.box = box
        self.bucket = bucket
        self.ttl = ttl
        self.server_ttl = server_ttl

    @classmethod
    async def open(cls, js: JetStreamContext, box: SecretBox, *, ttl: timedelta = DEFAULT_TTL,
                   bucket: str = AUTH_CACHE_BUCKET) -> AuthCache:
        try:
            kv = await js.key_value(bucket)
        except BucketNotFoundError:
            raise CredentialError(f'KV bucket "{bucket}" does not exist; run `noetl-stream init`') from None
        info = await js.stream_info(f"KV_{bucket}")
        return cls(js, kv, box, bucket=bucket, ttl=ttl,
                   server_ttl=bool(getattr(info.config, "allow_msg_ttl", False)))

    @staticmethod
    def key_for(name: str, execution_id: str | None = None) -> str:
        check_name(name)
        if execution_id is None:
            return f"global.{name}"
        # Execution ids are subject tokens when we make them; anything else is hashed into one.
        token = execution_id if ids.is_subject_token(execution_id) and "/" not in execution_id \
            else hashlib.sha256(execution_id.encode()).hexdigest()[:32]
        return f"execution.{token}.{name}"

    async def put(self, credential: Credential, *, execution_id: str | None = None,
                  ttl: timedelta | None = None) -> CacheEntry:
        """Cache `credential` (refreshing the material and extending the expiry of a hit)."""
        key = self.key_for(credential.name, execution_id)
        sealed = self.box.encrypt(jsonutil.dumps(credential.data))
        life_s = (ttl or self.ttl).total_seconds()
        for _ in range(MAX_UPDATE_ATTEMPTS):
            now = time.time()
            current, revision = await self._read(key)
            live = current is not None and not current.expired(now)
            entry = CacheEntry(
                cache_key=key, credential_name=credential.name, credential_type=credential.kind,
                scope_type="global" if execution_id is None else "execution",
                execution_id=execution_id, data_encrypted=sealed, expires_at=now + life_s,
                created_at=current.created_at if live and current else now, accessed_at=now,
                access_count=current.access_count if live and current else 0)
            try:
                await self._write(key, entry, revision, now)
            except _Conflict:
                continue
            return entry
        raise CredentialError(f'auth cache key "{key}" kept changing; gave up after '
                              f"{MAX_UPDATE_ATTEMPTS} attempts")

    async def get(self, name: str, *, execution_id: str | None = None) -> Credential | None:
        """The cached material, or None when absent or expired; counts the access."""
        key = self.key_for(name, execution_id)
        for _ in range(MAX_UPDATE_ATTEMPTS):
            now = time.time()
            current, revision = await self._read(key)
            if current is None or current.expired(now):
                return None
            touched = current.model_copy(update={"accessed_at": now,
                                                 "access_count": current.access_count + 1})
            try:
                await self._write(key, touched, revision, now)
            except _Conflict:
                continue
            data = jsonutil.loads(self.box.decrypt(current.data_encrypted))
            return Credential(name=current.credential_name, kind=current.credential_type, data=data)
        raise CredentialError(f'auth cache key "{key}" kept changing; gave up after '
                              f"{MAX_UPDATE_ATTEMPTS} attempts")

    async def entry(self, name: str, *, execution_id: str | None = None) -> CacheEntry | None:
        """The live entry's bookkeeping, without counting an access."""
        current, _ = await self._read(self.key_for(name, execution_id))
        return None if current is None or current.expired(time.time()) else current

    async def invalidate(self, name: str) -> None:
        """Forget `name` in every scope (after the credential changed or was removed)."""
        for pattern in (f"global.{check_name(name)}", f"execution.*.{name}"):
            for key in await self._keys(pattern):
                await self.kv.purge(key)

    async def clear(self) -> None:
        for key in await self._keys(">"):
            await self.kv.purge(key)

    async def _keys(self, pattern: str) -> list[str]:
        # kv.keys(filters=...) matches substrings on the client; a watch filters on the server.
        watcher = await self.kv.watch(pattern, ignore_deletes=True, meta_only=True)
        keys: list[str] = []
        try:
            async for entry in watcher:
                if entry is None:
                    break
                keys.append(entry.key)
        finally:
            await watcher.stop()  # type: ignore[no-untyped-call]
        return keys

    async def _read(self, key: str) -> tuple[CacheEntry | None, int]:
        try:
            got = await self.kv.get(key)
        except KeyDeletedError as exc:
            return None, int(exc.entry.revision) if exc.entry is not None else 0
        except KeyNotFoundError:
            return None, 0
        if not got.value:
            return None, int(got.revision or 0)
        return CacheEntry.model_validate_json(got.value), int(got.revision or 0)

    async def _write(self, key: str, entry: CacheEntry, revision: int, now: float) -> None:
        headers = {Header.EXPECTED_LAST_SUBJECT_SEQUENCE.value: str(revision)}
        # Nats-TTL takes whole seconds; round up so the server never drops a live entry early.
        msg_ttl = max(1, math.ceil(entry.expires_at - now)) if self.server_ttl else None
        try:
            await self.js.publish(f"$KV.{self.bucket}.{key}", entry.model_dump_json().encode(),
                                  headers=headers, msg_ttl=msg_ttl)
        except APIError as exc:
            if exc.err_code in _WRONG_LAST_SEQUENCE:
                raise _Conflict from None
            raise


class CachedCredentialResolver:
    """Resolves `auth:` names for tools: auth cache first, then the store (which decrypts).

    KV handles are opened on first use, so a worker whose playbooks never name a credential never
    touches the buckets.
    """

    def __init__(self, js: JetStreamContext, box: SecretBox, *, ttl: timedelta = DEFAULT_TTL) -> None:
        self.js = js
        self.box = box
        self.ttl = ttl
        self._store: CredentialStore | None = None
        self._cache: AuthCache | None = None

    async def _open(self) -> tuple[CredentialStore, AuthCache]:
        if self._store is None or self._cache is None:
            self._store = await CredentialStore.open(self.js, self.box)
            self._cache = await AuthCache.open(self.js, self.box, ttl=self.ttl)
        return self._store, self._cache

    async def resolve(self, name: str, *, execution_id: str | None = None) -> Credential:
        try:
            store, cache = await self._open()
            hit = await cache.get(name, execution_id=execution_id)
            if hit is not None:
                return hit
            credential = await store.get(name)
            if credential is not None:
                await cache.put(credential, execution_id=execution_id)
        except CredentialError as exc:
            raise ToolError(f'credential "{name}": {exc}') from None
        if credential is None:
            raise ToolError(f'no credential named "{name}"; add it with `noetl-stream credential set '
                            f'{name} --kind KIND --data JSON`')
        return credential
