"""`nats`: key-value, object store and JetStream operations on NATS.

Operations (field `operation`) and the fields each reads:

    kv_get      bucket, key           -> {bucket, key, value, encoding, revision}
    kv_put      bucket, key, value    -> {bucket, key, revision}
    kv_delete   bucket, key           -> {bucket, key, deleted}
    kv_keys     bucket, [key or pattern: a subject pattern] -> {bucket, keys, count}
    object_put  bucket, key, value    -> {bucket, key, name, size, digest}
    object_get  bucket, key           -> {bucket, key, name, data, encoding, size, digest}
    js_publish  subject, data, [headers] -> {stream, seq, duplicate}
    js_get_msg  stream, seq | subject -> {stream, seq, subject, data, encoding, headers, time}

It runs against the runtime's own connection, or, with `auth:` naming a credential whose data
holds a `url` (and optionally `user`/`password` or `token`), against that server: connect, run the
one operation, close. Values written are bytes as given for text, JSON for anything else. Bytes
read come back as text with `encoding: "utf-8"` when they decode as UTF-8, otherwise as base64
with `encoding: "base64"`, so results stay JSON; a key's text that parses as JSON is read as that
value, as NoETL's tools read it. Every result carries `status: "success"`, as NoETL's do, except
that a missing or deleted key answers `{status: "not_found", bucket, key, value: null}`: it is
an answer, not a failure, in NoETL too. Buckets and streams are never created here: a missing one
is a `not_found` error, as is a missing object or message. When the task's
`spec.idempotent` is true, `js_publish` sets `Nats-Msg-Id` to the call's idempotency key, so a
redelivered command publishes once within the stream's duplicate window. An object's name is
`key`, or NoETL's `name` (what its object operations read) when `key` is not given; the result
carries it under both names.
"""

from __future__ import annotations

import base64
import contextlib
from collections.abc import Awaitable, Callable, Mapping

import nats
import orjson
from nats.errors import Error as NatsError
from nats.errors import NoServersError
from nats.js import JetStreamContext
from nats.js.errors import KeyDeletedError, KeyNotFoundError, NoKeysError, NotFoundError

from noetl_stream.errors import NoetlStreamError
from noetl_stream.jsonutil import JsonObject, JsonValue
from noetl_stream.tools.base import Outcome, TaskCall, ToolServices

CONNECT_TIMEOUT_S = 5.0


def _encode(value: object) -> bytes:
    if isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode()
    return orjson.dumps(value)


def _decode(raw: bytes | None, name: str) -> dict[str, str | None]:
    if raw is None:
        return {name: None, "encoding": None}
    try:
        return {name: raw.decode("utf-8"), "encoding": "utf-8"}
    except UnicodeDecodeError:
        return {name: base64.b64encode(raw).decode("ascii"), "encoding": "base64"}


class _ConfigError(Exception):
    """A task field is missing or malformed; becomes a `config` error outcome."""


def _required(cfg: Mapping[str, JsonValue], name: str, operation: str) -> str:
    value = cfg.get(name)
    if value is None or value == "":
        raise _ConfigError(f'nats operation "{operation}" needs field {name}')
    return str(value)


async def _kv_get(js: JetStreamContext, cfg: Mapping[str, JsonValue],
                  call: TaskCall) -> JsonObject:
    bucket, key = _required(cfg, "bucket", "kv_get"), _required(cfg, "key", "kv_get")
    kv = await js.key_value(bucket)  # a missing bucket stays a not_found failure
    try:
        entry = await kv.get(key)
    except (KeyNotFoundError, KeyDeletedError):
        return {"status": "not_found", "bucket": bucket, "key": key, "value": None}
    decoded: dict[str, JsonValue] = {**_decode(entry.value, "value")}
    if decoded["encoding"] == "utf-8" and decoded["value"]:
        with contextlib.suppress(orjson.JSONDecodeError):
            decoded["value"] = orjson.loads(str(decoded["value"]))
    return {"bucket": bucket, "key": key, **decoded, "revision": entry.revision}


async def _kv_put(js: JetStreamContext, cfg: Mapping[str, JsonValue],
                  call: TaskCall) -> JsonObject:
    bucket, key = _required(cfg, "bucket", "kv_put"), _required(cfg, "key", "kv_put")
    revision = await (await js.key_value(bucket)).put(key, _encode(cfg.get("value")))
    return {"bucket": bucket, "key": key, "revision": revision}


async def _kv_delete(js: JetStreamContext, cfg: Mapping[str, JsonValue],
                  call: TaskCall) -> JsonObject:
    bucket, key = _required(cfg, "bucket", "kv_delete"), _required(cfg, "key", "kv_delete")
    deleted = await (await js.key_value(bucket)).delete(key)
    return {"bucket": bucket, "key": key, "deleted": bool(deleted)}


async def _kv_keys(js: JetStreamContext, cfg: Mapping[str, JsonValue],
                  call: TaskCall) -> JsonObject:
    bucket = _required(cfg, "bucket", "kv_keys")
    kv = await js.key_value(bucket)
    try:
        keys = await kv.keys()
    except NoKeysError:
        keys = []
    # nats-py filters by substring; a key filter here means a subject pattern, as in `nats kv ls`.
    # `pattern` is NoETL's name for the same filter.
    pattern = str(cfg.get("key") or cfg.get("pattern") or ">")
    matched: list[JsonValue] = [k for k in sorted(keys) if _subject_matches(pattern, k)]
    return {"bucket": bucket, "keys": matched, "count": len(matched)}


def _subject_matches(pattern: str, subject: str) -> bool:
    """NATS wildcards: `*` is one token, a trailing `>` is one or more."""
    want, have = pattern.split("."), subject.split(".")
    for i, token in enumerate(want):
        if token == ">":
            return len(have) > i
        if i >= len(have) or (token != "*" and token != have[i]):
            return False
    return len(want) == len(have)


def _object_name(cfg: Mapping[str, JsonValue], operation: str) -> str:
    """`key`, else NoETL's `name` (its nats tool names objects so)."""
    if cfg.get("key") in (None, "") and cfg.get("name") not in (None, ""):
        return str(cfg["name"])
    return _required(cfg, "key", operation)


async def _object_put(js: JetStreamContext, cfg: Mapping[str, JsonValue],
                  call: TaskCall) -> JsonObject:
    bucket, key = _required(cfg, "bucket", "object_put"), _object_name(cfg, "object_put")
    data = cfg.get("value", cfg.get("data"))
    info = await (await js.object_store(bucket)).put(key, _encode(data))
    return {"bucket": bucket, "key": key, "name": key, "size": info.size, "digest": info.digest}


async def _object_get(js: JetStreamContext, cfg: Mapping[str, JsonValue],
                  call: TaskCall) -> JsonObject:
    bucket, key = _required(cfg, "bucket", "object_get"), _object_name(cfg, "object_get")
    obj = await (await js.object_store(bucket)).get(key)
    return {"bucket": bucket, "key": key, "name": key, **_decode(obj.data or b"", "data"),
            "size": obj.info.size, "digest": obj.info.digest}


async def _js_publish(js: JetStreamContext, cfg: Mapping[str, JsonValue],
                  call: TaskCall) -> JsonObject:
    subject = _required(cfg, "subject", "js_publish")
    given = cfg.get("headers") or {}
    if not isinstance(given, dict):
        raise _ConfigError("nats field headers must be a mapping of header -> value, not "
                           f"{type(given).__name__}")
    headers = {str(k): str(v) for k, v in given.items()}
    if call.spec.get("idempotent"):
        headers["Nats-Msg-Id"] = call.idempotency_key
    ack = await js.publish(subject, _encode(cfg.get("data", cfg.get("value"))),
                           stream=str(cfg["stream"]) if cfg.get("stream") else None,
                           headers=headers or None)
    return {"stream": ack.stream, "seq": ack.seq, "duplicate": bool(ack.duplicate)}


async def _js_get_msg(js: JetStreamContext, cfg: Mapping[str, JsonValue],
                  call: TaskCall) -> JsonObject:
    stream = _required(cfg, "stream", "js_get_msg")
    seq, subject = cfg.get("seq"), cfg.get("subject")
    if seq is None and not subject:
        raise _ConfigError('nats operation "js_get_msg" needs field seq or subject')
    number = _sequence_number(seq)
    msg = await js.get_msg(stream, seq=number, subject=None if number is not None else str(subject))
    return {"stream": stream, "seq": msg.seq, "subject": msg.subject, **_decode(msg.data, "data"),
            "headers": dict(msg.headers or {}),
            "time": msg.time.isoformat() if msg.time is not None else None}


def _sequence_number(seq: JsonValue) -> int | None:
    if seq is None:
        return None
    if isinstance(seq, (int, float, str)):
        with contextlib.suppress(ValueError):
            return int(seq)
    raise _ConfigError(f"nats field seq must be an integer, got {seq!r}")


Operation = Callable[[JetStreamContext, Mapping[str, JsonValue], TaskCall], Awaitable[JsonObject]]

OPERATIONS: dict[str, Operation] = {
    "kv_get": _kv_get,
    "kv_put": _kv_put,
    "kv_delete": _kv_delete,
    "kv_keys": _kv_keys,
    "object_put": _object_put,
    "object_get": _object_get,
    "js_publish": _js_publish,
    "js_get_msg": _js_get_msg,
}


# NoETL's keychain rows name a NATS connection's fields with a `nats_` prefix.
_PREFIXED = {"nats_url": "url", "nats_user": "user", "nats_username": "user",
             "nats_password": "password", "nats_token": "token"}


def _connection_fields(data: Mapping[str, JsonValue]) -> JsonObject:
    """A credential's connection fields under their plain names (`nats_url` -> `url`); a plain
    name given too wins.
    """
    prefixed = {plain: data[name] for name, plain in _PREFIXED.items() if data.get(name)}
    return {**prefixed, **{k: v for k, v in data.items() if v}}


def _alias(auth: JsonValue) -> str | None:
    if auth is None or auth == "":
        return None
    if isinstance(auth, dict):
        name = auth.get("credential") or auth.get("name")
        return str(name) if name else None
    return str(auth)


def _answer(result: JsonObject) -> Outcome:
    """An operation's result with NoETL's `status` beside its fields."""
    return Outcome.success({"status": "success", **result})


async def _quiet(exc: Exception) -> None:
    """nats-py logs every failed attempt with its address; the outcome reports the failure."""


class NatsTool:
    kind = "nats"

    def __init__(self, services: ToolServices | None = None) -> None:
        self.services = services or ToolServices()

    async def run(self, call: TaskCall) -> Outcome:
        cfg = call.config
        name = str(cfg.get("operation") or "")
        operation = OPERATIONS.get(name)
        if operation is None:
            return Outcome.failure(f"nats operation {name!r} is not one of "
                                   f"{', '.join(OPERATIONS)}", "config")
        alias = _alias(cfg.get("auth"))
        try:
            if alias is None:
                if self.services.nats is None:
                    return Outcome.failure("nats task has no auth and this worker has no NATS "
                                           "connection to lend it", "config")
                return _answer(await operation(self.services.nats.jetstream(), cfg, call))
            return await self._run_elsewhere(alias, operation, cfg, call)
        except _ConfigError as exc:
            return Outcome.failure(str(exc), "config")
        except NotFoundError as exc:
            return Outcome.failure(f"nats {name}: not found: {exc}", "not_found")
        except NatsError as exc:
            # nats-py's timeouts are OSErrors too; every one of its errors is the service's answer.
            retryable = isinstance(exc, (TimeoutError, OSError))
            return Outcome.failure(f"nats {name} failed: {type(exc).__name__}: {exc}", "nats",
                                   retryable=retryable)
        except (ValueError, TypeError) as exc:
            return Outcome.failure(f"nats {name}: bad field value: {exc}", "config")

    async def _run_elsewhere(self, alias: str, operation: Operation, cfg: Mapping[str, JsonValue],
                             call: TaskCall) -> Outcome:
        if self.services.credentials is None:
            return Outcome.failure(f'nats auth "{alias}": this worker has no credential store',
                                   "auth")
        try:
            credential = await self.services.credentials.resolve(alias,
                                                                 execution_id=call.execution_id)
        except NoetlStreamError as exc:
            return Outcome.failure(str(exc), "auth")
        data = _connection_fields(credential.data)
        url = data.get("url")
        if not url:
            return Outcome.failure(f'nats auth "{alias}": the credential has no url', "config")
        options: JsonObject = {k: data[k] for k in ("user", "password", "token")
                                   if data.get(k)}
        try:
            # nats-py retries the first connect forever at 0 attempts; 1 means one retry.
            nc = await nats.connect(str(url), connect_timeout=CONNECT_TIMEOUT_S,
                                    allow_reconnect=False, max_reconnect_attempts=1,
                                    reconnect_time_wait=0.1, error_cb=_quiet, **options)
        except (NoServersError, OSError, TimeoutError) as exc:
            # The url may carry a password: name the credential, not the address.
            return Outcome.failure(f'nats auth "{alias}": cannot connect: {type(exc).__name__}',
                                   "connection", retryable=True)
        try:
            return _answer(await operation(nc.jetstream(), cfg, call))
        finally:
            await nc.close()

    async def close(self) -> None:
        return None
