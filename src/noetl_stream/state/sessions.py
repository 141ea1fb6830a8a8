"""API sessions in KV `noetl_sessions`, one entry per login, with a TTL per entry.

Invariants:
- The token is never stored. The key is the first 32 hex digits of its sha256 (the `session_id`
  users see and delete by); the record holds the whole digest, compared in constant time. A
  reader of the bucket cannot use what it reads.
- Expiry is enforced twice, as in `auth_cache.py`: each write carries a per-message TTL
  (`Nats-TTL`) so the server drops dead sessions, and `expires_at` is checked on every read.
- A session belongs to one incarnation of its user: it records the user's `created_at`, and
  authentication refuses it when the user now stored under that name was created at another
  time. A user removed and added again (with other roles) never gets the old sessions back,
  even one that `end_user` missed.
- Sliding expiry: a use moves `expires_at` forward by a revision-checked update, at most once per
  `refresh_every`, so a busy client costs one KV write a minute, not one per request. A lost
  update race is ignored (someone else just refreshed it); a deleted session is never revived,
  because its revision moved.
"""

from __future__ import annotations

import hashlib
import hmac
import math
import re
import secrets
import time
from collections.abc import Callable
from datetime import datetime, timedelta

from nats.js import JetStreamContext
from nats.js.api import Header
from nats.js.errors import APIError, KeyNotFoundError
from nats.js.kv import KeyValue
from pydantic import BaseModel, ConfigDict, Field

from noetl_stream.formats import SESSION
from noetl_stream.state.kv_keys import bucket_keys
from noetl_stream.state.users import Role
from noetl_stream.state.versioned import Versioned

SESSIONS_BUCKET = "noetl_sessions"
SESSION_TOKEN_PREFIX = "nss_"
DEFAULT_SESSION_TTL = timedelta(hours=8)
DEFAULT_REFRESH_EVERY = timedelta(seconds=60)
_WRONG_LAST_SEQUENCE = (10071, 10164)
_SESSION_ID = re.compile(r"[0-9a-f]{32}")


class SessionInfo(BaseModel):
    """A session as shown to its owner (and admins)."""

    model_config = ConfigDict(frozen=True)

    session_id: str
    user: str
    roles: list[Role]
    created_at: float = Field(description="Unix time of the login")
    expires_at: float = Field(description="Unix time it ends unless used again")
    last_used_at: float
    client: str | None = Field(None, description="Remote address at login")


class SessionRecord(SessionInfo, Versioned):
    FORMAT = SESSION

    digest: str = Field(description="sha256 hex of the token")
    ttl_s: float
    user_since: datetime | None = Field(
        None, description="created_at of the user the session was opened for (None: written "
        "before sessions were bound to it, never accepted)")

    def info(self) -> SessionInfo:
        return SessionInfo.model_validate(
            self.model_dump(exclude={"digest", "ttl_s", "user_since"}))

    def expired(self, now: float) -> bool:
        return now >= self.expires_at


def session_id_of(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()[:32]




class SessionStore:
    def __init__(self, js: JetStreamContext, kv: KeyValue, *, bucket: str = SESSIONS_BUCKET,
                 ttl: timedelta = DEFAULT_SESSION_TTL,
                 refresh_every: timedelta = DEFAULT_REFRESH_EVERY,
                 server_ttl: bool = True, clock: Callable[[], float] = time.time) -> None:
        self.js = js
        self.kv = kv
        self.bucket = bucket
        self.ttl = ttl
        self.refresh_every = refresh_every
        self.server_ttl = server_ttl
        self.clock = clock

    @classmethod
    async def open(cls, js: JetStreamContext, *, bucket: str = SESSIONS_BUCKET,
                   ttl: timedelta = DEFAULT_SESSION_TTL,
                   refresh_every: timedelta = DEFAULT_REFRESH_EVERY,
                   clock: Callable[[], float] = time.time) -> SessionStore:
        kv = await js.key_value(bucket)
        info = await js.stream_info(f"KV_{bucket}")
        return cls(js, kv, bucket=bucket, ttl=ttl, refresh_every=refresh_every, clock=clock,
                   server_ttl=bool(getattr(info.config, "allow_msg_ttl", False)))

    async def create(self, user: str, roles: list[Role], *, client: str | None = None,
                     user_since: datetime | None = None) -> tuple[str, SessionRecord]:
        """A new session: (its token, shown only now, and its record); `user_since` is the
        user's `created_at`, which authentication checks against the stored user.
        """
        token = SESSION_TOKEN_PREFIX + secrets.token_urlsafe(32)
        digest = hashlib.sha256(token.encode()).hexdigest()
        now = self.clock()
        ttl_s = self.ttl.total_seconds()
        record = SessionRecord(session_id=digest[:32], user=user, roles=roles, created_at=now,
                               expires_at=now + ttl_s, last_used_at=now, client=client,
                               digest=digest, ttl_s=ttl_s, user_since=user_since)
        await self._write(record, revision=0)
        return token, record

    async def lookup(self, token: str) -> SessionRecord | None:
        """The live session of `token` (its expiry slid forward when due), or None."""
        if not token.startswith(SESSION_TOKEN_PREFIX):
            return None
        digest = hashlib.sha256(token.encode()).hexdigest()
        record, revision = await self._read(digest[:32])
        now = self.clock()
        if record is None or not hmac.compare_digest(record.digest, digest) or record.expired(now):
            return None
        if now - record.last_used_at >= self.refresh_every.total_seconds():
            touched = record.model_copy(update={"last_used_at": now,
                                                "expires_at": now + record.ttl_s})
            if await self._write(touched, revision=revision):
                return touched
        return record

    async def get(self, session_id: str) -> SessionRecord | None:
        record, _ = await self._read(session_id)
        return None if record is None or record.expired(self.clock()) else record

    async def list(self, user: str | None = None) -> list[SessionRecord]:
        now = self.clock()
        out = []
        for key in await bucket_keys(self.js, self.bucket):
            record, _ = await self._read(key)
            if record is not None and not record.expired(now) and user in (None, record.user):
                out.append(record)
        return sorted(out, key=lambda r: r.created_at)

    async def delete(self, session_id: str) -> bool:
        """End a session; False when there was no live one."""
        if await self.get(session_id) is None:
            return False
        await self.kv.purge(session_id)
        return True

    async def end_user(self, user: str) -> int:
        """End every session of `user`, expired ones too (their records go); how many."""
        ended = 0
        for key in await bucket_keys(self.js, self.bucket):
            record, _ = await self._read(key)
            if record is not None and record.user == user:
                await self.kv.purge(key)
                ended += 1
        return ended

    async def _read(self, session_id: str) -> tuple[SessionRecord | None, int]:
        if not _SESSION_ID.fullmatch(session_id):
            return None, 0
        try:
            entry = await self.kv.get(session_id)
        except KeyNotFoundError:  # KeyDeletedError too
            return None, 0
        if not entry.value:
            return None, int(entry.revision or 0)
        return SessionRecord.model_validate_json(entry.value), int(entry.revision or 0)

    async def _write(self, record: SessionRecord, *, revision: int) -> bool:
        """Write `record` if the key is still at `revision` (0: absent); False on a lost race."""
        headers = {Header.EXPECTED_LAST_SUBJECT_SEQUENCE.value: str(revision)}
        # Nats-TTL takes whole seconds (at least one); round up so the server never drops a live
        # session early. `expires_at` stays the precise limit.
        msg_ttl = max(1, math.ceil(record.expires_at - self.clock())) if self.server_ttl else None
        try:
            await self.js.publish(f"$KV.{self.bucket}.{record.session_id}",
                                  record.model_dump_json().encode(), headers=headers, msg_ttl=msg_ttl)
        except APIError as exc:
            if exc.err_code in _WRONG_LAST_SEQUENCE:
                return False
            raise
        return True
