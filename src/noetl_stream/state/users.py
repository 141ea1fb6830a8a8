"""API users (KV `noetl_users`) and API keys (KV `noetl_api_keys`): who may call the HTTP API.

Invariants:
- No secret is stored in clear. A password is kept as an scrypt hash with its own random salt (a
  slow KDF, because passwords are guessable); an API key as its sha256 (keys are 256 random bits,
  so a fast hash cannot be brute-forced). Whoever reads the buckets cannot log in with what they
  read.
- Secrets are compared with `hmac.compare_digest`, and checking the password of an unknown user
  costs the same scrypt run as a known one, so timing tells nothing about which names exist.
- Hashing runs in a thread: one scrypt call takes tens of milliseconds of CPU.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import re
import secrets
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Literal, get_args

from nats.js import JetStreamContext
from nats.js.errors import KeyNotFoundError, KeyWrongLastSequenceError
from nats.js.kv import KeyValue
from pydantic import BaseModel, ConfigDict, Field

from noetl_stream.errors import NoetlStreamError
from noetl_stream.formats import API_KEY, USER
from noetl_stream.state.kv_keys import bucket_keys
from noetl_stream.state.records import Skips, read_each
from noetl_stream.state.versioned import Versioned

USERS_BUCKET = "noetl_users"
API_KEYS_BUCKET = "noetl_api_keys"
API_KEY_PREFIX = "nsk_"

Role = Literal["admin", "operator", "viewer", "worker"]
ROLES: tuple[str, ...] = get_args(Role)

_USER_NAME = re.compile(r"[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*")
# scrypt cost: n=2**14, r=8 takes ~50 ms and 16 MiB here, the interactive-login figure of RFC 7914.
_SCRYPT_N, _SCRYPT_R, _SCRYPT_P, _SCRYPT_LEN = 2**14, 8, 1, 32


class AccountError(NoetlStreamError, ValueError):
    """A user name, role or API key is malformed, unknown or already taken."""


def check_user_name(name: str) -> str:
    if len(name) > 128 or not _USER_NAME.fullmatch(name):
        raise AccountError(f'user name "{name}" is not valid: use letters, digits, "_" and "-" '
                           "(dots may separate parts)")
    return name


def check_roles(roles: Iterable[str]) -> list[Role]:
    out: list[Role] = []
    for role in roles:
        if role not in ROLES:
            raise AccountError(f'unknown role "{role}" (known: {", ".join(ROLES)})')
        out.append(role)  # type: ignore[arg-type]  # checked against ROLES just above
    if not out:
        raise AccountError("at least one role is needed")
    return sorted(set(out))


# -- passwords ---------------------------------------------------------------------------------
class PasswordHash(BaseModel):
    """An scrypt hash of a password with its parameters, so they can be raised later."""

    model_config = ConfigDict(frozen=True)

    algorithm: Literal["scrypt"] = "scrypt"
    n: int
    r: int
    p: int
    salt: str = Field(description="base64 of 16 random bytes")
    hash: str = Field(description="base64 of the derived key")


def _scrypt(password: str, salt: bytes, n: int, r: int, p: int, length: int) -> bytes:
    return hashlib.scrypt(password.encode(), salt=salt, n=n, r=r, p=p, dklen=length,
                          maxmem=128 * r * n * 2)


def hash_password(password: str) -> PasswordHash:
    salt = secrets.token_bytes(16)
    derived = _scrypt(password, salt, _SCRYPT_N, _SCRYPT_R, _SCRYPT_P, _SCRYPT_LEN)
    return PasswordHash(n=_SCRYPT_N, r=_SCRYPT_R, p=_SCRYPT_P, salt=base64.b64encode(salt).decode(),
                        hash=base64.b64encode(derived).decode())


def check_password(password: str, stored: PasswordHash) -> bool:
    expected = base64.b64decode(stored.hash)
    derived = _scrypt(password, base64.b64decode(stored.salt), stored.n, stored.r, stored.p,
                      len(expected))
    return hmac.compare_digest(derived, expected)


# A hash to check against when the user does not exist, so that case costs the same time.
_DECOY = PasswordHash(n=_SCRYPT_N, r=_SCRYPT_R, p=_SCRYPT_P, salt="AAAAAAAAAAAAAAAAAAAAAA==",
                      hash=base64.b64encode(bytes(_SCRYPT_LEN)).decode())


# -- users -------------------------------------------------------------------------------------
class UserInfo(BaseModel):
    """A user as listed: never the password hash."""

    model_config = ConfigDict(frozen=True)

    name: str
    roles: list[Role]
    created_at: datetime


class UserRecord(UserInfo, Versioned):
    FORMAT = USER

    password: PasswordHash | None = Field(None, description="None: the user logs in by API key only")

    def info(self) -> UserInfo:
        return UserInfo(name=self.name, roles=self.roles, created_at=self.created_at)


async def _get_json(kv: KeyValue, key: str) -> bytes | None:
    try:
        entry = await kv.get(key)
    except KeyNotFoundError:  # KeyDeletedError too: a removed key
        return None
    return bytes(entry.value) if entry.value else None


class UserStore:
    def __init__(self, js: JetStreamContext, kv: KeyValue, bucket: str = USERS_BUCKET) -> None:
        self.js = js
        self.kv = kv
        self.bucket = bucket

    @classmethod
    async def open(cls, js: JetStreamContext, bucket: str = USERS_BUCKET) -> UserStore:
        return cls(js, await js.key_value(bucket), bucket)

    async def add(self, name: str, roles: Iterable[str], password: str | None) -> UserInfo:
        """Create user `name`; AccountError when it exists."""
        check_user_name(name)
        hashed = await asyncio.to_thread(hash_password, password) if password is not None else None
        record = UserRecord(name=name, roles=check_roles(roles), created_at=datetime.now(UTC),
                            password=hashed)
        try:
            await self.kv.create(name, record.model_dump_json().encode())
        except KeyWrongLastSequenceError:
            raise AccountError(f'user "{name}" exists; remove it first to change it') from None
        return record.info()

    async def get(self, name: str) -> UserRecord | None:
        if not _USER_NAME.fullmatch(name) or len(name) > 128:
            return None
        raw = await _get_json(self.kv, name)
        return UserRecord.model_validate_json(raw) if raw else None

    async def verify(self, name: str, password: str) -> UserRecord | None:
        """The user when `password` is theirs; None otherwise (unknown users cost the same)."""
        record = await self.get(name)
        stored = record.password if record is not None and record.password is not None else _DECOY
        good = await asyncio.to_thread(check_password, password, stored)
        return record if good and record is not None and record.password is not None else None

    async def list(self, skips: Skips | None = None) -> list[UserInfo]:
        """Every user; a record that does not decode is named in `skips` (and logged)."""
        records = await read_each(await bucket_keys(self.js, self.bucket), self.get,
                                  skips if skips is not None else Skips("user"))
        return [record.info() for record in records]

    async def remove(self, name: str) -> bool:
        """Remove `name`; a record that no longer decodes is removed too."""
        if not _USER_NAME.fullmatch(name) or len(name) > 128 \
                or await _get_json(self.kv, name) is None:
            return False
        await self.kv.purge(name)
        return True


# -- API keys ----------------------------------------------------------------------------------
class ApiKeyInfo(BaseModel):
    """An API key as listed: its id, never the key."""

    model_config = ConfigDict(frozen=True)

    key_id: str
    user: str
    roles: list[Role]
    description: str | None = None
    created_at: datetime


class ApiKeyRecord(ApiKeyInfo, Versioned):
    FORMAT = API_KEY

    digest: str = Field(description="sha256 hex of the whole key")
    user_since: datetime | None = Field(
        None, description="created_at of the user the key was made for: a user added again "
        "under the same name does not get it (None: a key made before keys recorded it)")

    def info(self) -> ApiKeyInfo:
        return ApiKeyInfo.model_validate(self.model_dump(exclude={"digest", "user_since"}))

    def belongs_to(self, user: UserRecord) -> bool:
        return self.user_since is None or self.user_since == user.created_at


def _digest(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


class ApiKeyStore:
    """Keys are stored under the first 32 hex digits of their sha256 (the `key_id`); the record
    holds the whole digest, compared in constant time.
    """

    def __init__(self, js: JetStreamContext, kv: KeyValue, bucket: str = API_KEYS_BUCKET) -> None:
        self.js = js
        self.kv = kv
        self.bucket = bucket

    @classmethod
    async def open(cls, js: JetStreamContext, bucket: str = API_KEYS_BUCKET) -> ApiKeyStore:
        return cls(js, await js.key_value(bucket), bucket)

    async def create(self, user: str, roles: Iterable[str], *, description: str | None = None,
                     user_since: datetime | None = None) -> tuple[str, ApiKeyInfo]:
        """A new key for `user` (created at `user_since`): (the key, shown only now, and its
        record).
        """
        key = API_KEY_PREFIX + secrets.token_urlsafe(32)
        digest = _digest(key)
        record = ApiKeyRecord(key_id=digest[:32], user=check_user_name(user), roles=check_roles(roles),
                              description=description, created_at=datetime.now(UTC), digest=digest,
                              user_since=user_since)
        await self.kv.create(record.key_id, record.model_dump_json().encode())
        return key, record.info()

    async def lookup(self, key: str) -> ApiKeyRecord | None:
        if not key.startswith(API_KEY_PREFIX):
            return None
        digest = _digest(key)
        raw = await _get_json(self.kv, digest[:32])
        if raw is None:
            return None
        record = ApiKeyRecord.model_validate_json(raw)
        return record if hmac.compare_digest(record.digest, digest) else None

    async def list(self, user: str | None = None,
                   skips: Skips | None = None) -> list[ApiKeyInfo]:
        """The keys (of `user`); a record that does not decode is named in `skips` (and
        logged), so one cannot stop a user's other keys from being listed or removed with them.
        """
        async def read(key: str) -> ApiKeyRecord | None:
            raw = await _get_json(self.kv, key)
            return ApiKeyRecord.model_validate_json(raw) if raw is not None else None

        records = await read_each(await bucket_keys(self.js, self.bucket), read,
                                  skips if skips is not None else Skips("API key"))
        return [r.info() for r in records if user is None or r.user == user]

    async def remove(self, key_id: str) -> bool:
        if not re.fullmatch(r"[0-9a-f]{32}", key_id) or await _get_json(self.kv, key_id) is None:
            return False
        await self.kv.purge(key_id)
        return True
