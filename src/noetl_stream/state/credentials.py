"""Credentials in KV `noetl_credentials`, keyed by name, with their material encrypted at rest.

A record is `{name, kind, data, description, tags, scope, created_at, updated_at}`; `scope`
(noetl_stream/credentials.py) says which playbooks may use it, null for every playbook; `data` is a Fernet
token of `{"name", "kind", "data"}`, so a token copied onto another record fails to decrypt into
it. Material is validated per kind before it is stored. No message raised here holds a secret:
validation errors name fields, never values.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime

from nats.js import JetStreamContext
from nats.js.errors import BucketNotFoundError, KeyNotFoundError, NoKeysError
from nats.js.kv import KeyValue
from pydantic import AliasChoices, BaseModel, ConfigDict, Field, ValidationError, model_validator
from pydantic_core import ErrorDetails

from noetl_stream import jsonutil
from noetl_stream.credentials import Credential, CredentialScope
from noetl_stream.errors import CredentialError
from noetl_stream.formats import CREDENTIAL
from noetl_stream.jsonutil import JsonObject, JsonValue
from noetl_stream.state.crypto import SecretBox
from noetl_stream.state.records import Skips, read_each
from noetl_stream.state.versioned import Versioned

CREDENTIALS_BUCKET = "noetl_credentials"
MASK = "***"
_NAME_RE = re.compile(r"^[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*$")


class _Material(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class PostgresMaterial(_Material):
    dsn: str | None = Field(None, description="libpq URI or key=value string; wins over the fields")
    host: str | None = Field(None, validation_alias=AliasChoices("host", "db_host"))
    port: int | None = Field(None, validation_alias=AliasChoices("port", "db_port"))
    user: str | None = Field(None, validation_alias=AliasChoices("user", "username", "db_user"))
    password: str | None = Field(None, validation_alias=AliasChoices("password", "db_password"))
    database: str | None = Field(None, validation_alias=AliasChoices("database", "dbname", "db_name"))
    sslmode: str | None = None

    @model_validator(mode="after")
    def _dsn_or_host(self) -> PostgresMaterial:
        if not self.dsn and not self.host:
            raise ValueError('needs "dsn", or "host" with user/password/database')
        return self


class BearerMaterial(_Material):
    token: str = Field(min_length=1)


class BasicMaterial(_Material):
    username: str
    password: str


class ApiKeyMaterial(_Material):
    header: str = Field("X-API-Key", min_length=1, description="HTTP header that carries the key")
    value: str = Field(min_length=1)


class GenericMaterial(BaseModel):
    model_config = ConfigDict(extra="allow", frozen=True)


MATERIAL_MODELS: dict[str, type[BaseModel]] = {
    "postgres": PostgresMaterial,
    "bearer": BearerMaterial,
    "basic": BasicMaterial,
    "api_key": ApiKeyMaterial,
    "generic": GenericMaterial,
}

# Fields shown in clear by `credential get` without --show-secrets; everything else is masked.
PUBLIC_FIELDS: dict[str, frozenset[str]] = {
    "postgres": frozenset({"host", "port", "user", "database", "sslmode"}),
    "basic": frozenset({"username"}),
    "api_key": frozenset({"header"}),
}


def check_name(name: str) -> str:
    if not _NAME_RE.match(name) or len(name) > 200:
        raise CredentialError(f'credential name "{name}" is not valid: use letters, digits, "_" and "-" '
                              '(dots may separate parts)')
    return name


def validate_material(kind: str, data: JsonValue) -> JsonObject:
    """Check `data` against `kind`'s fields; return it normalized (aliases resolved, nulls dropped)."""
    model = MATERIAL_MODELS.get(kind)
    if model is None:
        near = difflib.get_close_matches(kind, MATERIAL_MODELS, n=1)
        hint = f'; did you mean "{near[0]}"?' if near else ""
        raise CredentialError(f'unknown credential kind "{kind}"{hint} '
                              f"(known: {', '.join(MATERIAL_MODELS)})")
    if not isinstance(data, dict):
        raise CredentialError(f"{kind} credential data must be a JSON object")
    try:
        parsed = model.model_validate(data)
    except ValidationError as exc:
        raise CredentialError(f"{kind} credential data is invalid for {exc.error_count()} "
                              f"reason(s): " + "; ".join(_describe(kind, e) for e in exc.errors())) from None
    return parsed.model_dump(exclude_none=True)


def _describe(kind: str, error: ErrorDetails) -> str:
    # Only the location and pydantic's message: the input value may be the secret itself.
    where = ".".join(str(p) for p in error["loc"])
    if error["type"] == "extra_forbidden":
        fields = [f for f in MATERIAL_MODELS[kind].model_fields]
        near = difflib.get_close_matches(where, fields, n=1)
        hint = f'; did you mean "{near[0]}"?' if near else f" (fields: {', '.join(fields)})"
        return f'unknown field "{where}"{hint}'
    if error["type"] == "missing":
        return f'field "{where}" is required'
    return f'field "{where}": {error["msg"]}' if where else str(error["msg"]).removeprefix("Value error, ")


def mask(kind: str, data: Mapping[str, JsonValue]) -> JsonObject:
    public = PUBLIC_FIELDS.get(kind, frozenset())
    return {k: (v if k in public else MASK) for k, v in data.items()}


class CredentialInfo(BaseModel):
    """A stored credential without its material: what `list` shows."""

    model_config = ConfigDict(frozen=True)

    name: str
    kind: str
    description: str | None = None
    tags: list[str] = Field(default_factory=list)
    scope: CredentialScope | None = Field(
        None, description="The playbooks that may use it; null (credentials stored before scopes "
        "existed, or set without one): every playbook.")
    created_at: datetime
    updated_at: datetime


class CredentialRecord(CredentialInfo, Versioned):
    """The KV value: the info plus `data`, a Fernet token of the material."""

    FORMAT = CREDENTIAL

    data: str

    def info(self) -> CredentialInfo:
        return CredentialInfo.model_validate(self.model_dump(exclude={"data"}))


class KeepScope:
    """`CredentialStore.set`'s default: keep the scope the credential already has."""


KEEP_SCOPE = KeepScope()


class CredentialStore:
    """Create, read, list and delete credentials; material is decrypted only by `get`."""

    def __init__(self, kv: KeyValue, box: SecretBox, js: JetStreamContext | None = None,
                 bucket: str = CREDENTIALS_BUCKET) -> None:
        self.kv = kv
        self.box = box
        self.js = js
        self.bucket = bucket

    @classmethod
    async def open(cls, js: JetStreamContext, box: SecretBox, *,
                   bucket: str = CREDENTIALS_BUCKET) -> CredentialStore:
        try:
            kv = await js.key_value(bucket)
        except BucketNotFoundError:
            raise CredentialError(f'KV bucket "{bucket}" does not exist; run `noetl-stream init`') from None
        return cls(kv, box, js, bucket)

    async def set(self, name: str, kind: str, data: JsonValue, *, description: str | None = None,
                  tags: Iterable[str] = (),
                  scope: CredentialScope | KeepScope | None = KEEP_SCOPE) -> CredentialInfo:
        """Store `name`. Without `scope`, a credential that had one keeps it (replacing the
        material never widens who may use it); `scope=None` lets every playbook use it.
        """
        check_name(name)
        material = validate_material(kind, data)
        now = datetime.now(UTC)
        previous = await self._record(name)
        if isinstance(scope, KeepScope):
            scope = previous.scope if previous is not None else None
        sealed = self.box.encrypt(jsonutil.dumps({"name": name, "kind": kind, "data": material}))
        record = CredentialRecord(name=name, kind=kind, data=sealed, description=description,
                                  tags=list(tags), scope=scope, updated_at=now,
                                  created_at=previous.created_at if previous else now)
        await self.kv.put(name, record.model_dump_json().encode())
        return record.info()

    async def info(self, name: str) -> CredentialInfo | None:
        record = await self._record(check_name(name))
        return record.info() if record else None

    async def get(self, name: str) -> Credential | None:
        """The decrypted material, or None when no credential has that name."""
        record = await self._record(check_name(name))
        if record is None:
            return None
        opened = jsonutil.loads(self.box.decrypt(record.data))
        if opened.get("name") != record.name or opened.get("kind") != record.kind:
            raise CredentialError(f'credential "{name}": its material belongs to another record')
        return Credential(name=record.name, kind=record.kind, data=dict(opened["data"]))

    async def list(self, skips: Skips | None = None) -> list[CredentialInfo]:
        """Every credential's description; a record that does not decode is named in `skips`."""
        records = await read_each(sorted(await self._keys()), self._record,
                                  skips if skips is not None else Skips("credential"))
        return [record.info() for record in records]

    async def _keys(self) -> Sequence[str]:
        """Every key the bucket's stream holds a subject for (deleted ones included).

        One stream-info request with a subject filter: deterministic, unlike kv.keys(), whose
        watcher can stop early on a busy server and return part of the list.
        """
        if self.js is None:
            try:
                return list(await self.kv.keys())
            except NoKeysError:
                return []
        prefix = f"$KV.{self.bucket}."
        info = await self.js.stream_info(f"KV_{self.bucket}", subjects_filter=f"{prefix}>")
        subjects = info.state.subjects or {}
        return [subject[len(prefix):] for subject in subjects]

    async def delete(self, name: str) -> bool:
        """Remove `name` and its history; False when it did not exist. A record that no longer
        decodes is removed too: deleting it is how one gets rid of it.
        """
        try:
            entry = await self.kv.get(check_name(name))
        except KeyNotFoundError:
            return False
        if not entry.value:
            return False
        await self.kv.purge(name)
        return True

    async def rotate_key(self, skips: Skips) -> int:
        """Re-encrypt every credential with the first configured key; return how many. One that
        cannot be read or decrypted stays as it was and is named in `skips`.
        """

        async def rotate(name: str) -> bool | None:
            record = await self._record(name)
            if record is None:
                return None
            rotated = record.model_copy(update={"data": self.box.rotate(record.data)})
            await self.kv.put(name, rotated.model_dump_json().encode())
            return True

        return len(await read_each(sorted(await self._keys()), rotate, skips))

    async def _record(self, name: str) -> CredentialRecord | None:
        try:
            entry = await self.kv.get(name)
        except KeyNotFoundError:
            return None
        if not entry.value:
            return None
        return CredentialRecord.model_validate_json(entry.value)
