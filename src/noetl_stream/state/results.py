"""Results in the NATS object store `noetl_results`, addressed by content hash (spec 002 §10).

`externalize` turns a value whose JSON is larger than the payload limit into a reference (see
`refs.py`) after storing its bytes; `resolve` does the reverse wherever references sit inside a
structure. Objects are content-addressed, so storing the same value twice (a redelivered command,
two workers) writes one object, and a fetched object is checked against its key before use.
Fetched bytes are cached per process (least recently used first out, bounded in bytes).

The store has no age limit; the retention sweep removes objects no kept execution can refer to
(server/result_sweep.py). For that, an object is reused only if it was written less than
`REFRESH_S` ago: an older one is written again, so its last write is never much older than the
start of an execution that refers to it.
"""

from __future__ import annotations

import hashlib
import time
from collections import OrderedDict
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from nats.js import JetStreamContext
from nats.js.api import ObjectInfo
from nats.js.errors import NotFoundError, ObjectNotFoundError
from nats.js.object_store import ObjectStore

from noetl_stream import jsonutil, refs
from noetl_stream.errors import InfrastructureError
from noetl_stream.jsonutil import JsonObject, JsonValue

CACHE_BYTES = 64 * 1024 * 1024
REFRESH_S = 3600.0


class ResultStore:
    """Puts and fetches result objects; opens the object store on first use."""

    def __init__(self, js: JetStreamContext, *, cache_bytes: int = CACHE_BYTES) -> None:
        self.js = js
        self._obs: ObjectStore | None = None
        self._cache: OrderedDict[str, bytes] = OrderedDict()
        self._cached_bytes = 0
        self._cache_limit = cache_bytes

    async def _store(self) -> ObjectStore:
        if self._obs is None:
            try:
                self._obs = await self.js.object_store(refs.RESULTS_STORE)
            except NotFoundError:
                raise InfrastructureError(f'object store "{refs.RESULTS_STORE}" does not exist; '
                                          "run `noetl-stream init`") from None
        return self._obs

    async def put_bytes(self, data: bytes, **extra: JsonValue) -> JsonObject:
        """Store `data` (unless an object with its hash exists) and return its reference."""
        key = hashlib.sha256(data).hexdigest()
        obs = await self._store()
        try:
            fresh = written_within(await obs.get_info(key), REFRESH_S)
        except ObjectNotFoundError:
            fresh = False
        if not fresh:
            await obs.put(key, data)
        self._remember(key, data)
        return refs.make_ref(key, len(data), **extra)

    async def put_binary(self, data: bytes, *, content_type: str | None) -> JsonObject:
        """Raw bytes (not JSON) as a reference that readers never inline."""
        return await self.put_bytes(data, encoding="binary", content_type=content_type)

    async def externalize(self, value: JsonValue, limit: int) -> JsonValue:
        """`value` itself when its JSON fits in `limit` bytes, else a reference to it."""
        if value is None or isinstance(value, (bool, int, float)) or refs.ref_of(value) is not None:
            return value
        if isinstance(value, str) and len(value) * 6 + 2 <= limit:
            return value  # fits even if every character were escaped as \uXXXX
        data = jsonutil.dumps(value)
        if len(data) <= limit:
            return value
        return await self.put_bytes(data)

    async def externalize_outcome(self, body: JsonObject, limit: object) -> JsonObject:
        """An outcome event's `result` and each `ctx_patch` value, as references where too large."""
        size = limit if isinstance(limit, int) and limit > 0 else refs.DEFAULT_MAX_PAYLOAD_BYTES
        body["result"] = await self.externalize(body.get("result"), size)
        patch = body.get("ctx_patch")
        if isinstance(patch, dict):
            body["ctx_patch"] = {k: await self.externalize(v, size) for k, v in patch.items()}
        return body

    async def fetch(self, ref: Mapping[str, JsonValue]) -> bytes:
        """The bytes a reference points at, checked against its content hash."""
        key = str(ref["key"])
        data = self._cache.get(key)
        if data is not None:
            self._cache.move_to_end(key)
            return data
        obs = await self._store()
        try:
            got = await obs.get(key)
        except ObjectNotFoundError:
            raise InfrastructureError(f'result object "{key}" is missing from '
                                      f'"{refs.RESULTS_STORE}" (expired or removed)') from None
        data = bytes(got.data or b"")
        if hashlib.sha256(data).hexdigest() != key:
            raise InfrastructureError(f'result object "{key}" does not match its checksum')
        self._remember(key, data)
        return data

    async def resolve(self, value: JsonValue) -> Any:
        """`value` with every JSON reference inside it replaced by the value it points at."""
        if isinstance(value, dict):
            inner = refs.ref_of(value)
            if inner is None:
                return {k: await self.resolve(v) for k, v in value.items()}
            if not refs.is_json_ref(value):
                return value  # binary: stays a reference
            data = await self.fetch(inner)
            # A stored value may hold references itself (a loop's results, moved out of a
            # state that grew too large, server/state_size.py).
            loaded = jsonutil.loads(data)
            return await self.resolve(loaded) if holds_ref(data) else loaded
        if isinstance(value, list):
            return [await self.resolve(v) for v in value]
        return value

    def _remember(self, key: str, data: bytes) -> None:
        if len(data) > self._cache_limit or key in self._cache:
            return
        self._cache[key] = data
        self._cached_bytes += len(data)
        while self._cached_bytes > self._cache_limit:
            _, dropped = self._cache.popitem(last=False)
            self._cached_bytes -= len(dropped)


def written_within(info: ObjectInfo, seconds: float) -> bool:
    """Whether an object's last write (its `mtime`) is less than `seconds` old."""
    try:
        written = datetime.fromisoformat(str(info.mtime)).timestamp()
    except ValueError:
        return False  # no readable time: write it again
    return time.time() - written < seconds


def holds_ref(data: bytes) -> bool:
    """Whether a message body may contain a reference (a cheap test before parsing)."""
    return b'"$ref"' in data
