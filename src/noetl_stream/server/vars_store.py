"""`vars:` values in KV `noetl_vars` as `<execution_id>.<name>`, one put per changed value.

The router extracts vars into its state (pure); the server writes the ones an event group changed
after it has committed that state. The bucket is a projection of the state: whatever a crash
between commit and put leaves out is still in the execution's snapshot and its final event.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping

from nats.js import JetStreamContext
from nats.js.errors import NoKeysError
from nats.js.kv import KeyValue

from noetl_stream import jsonutil
from noetl_stream.jsonutil import JsonObject, JsonValue
from noetl_stream.state.records import Skips

log = logging.getLogger("noetl_stream.vars")

VARS_BUCKET = "noetl_vars"
_NAME = re.compile(r"[-/_=A-Za-z0-9]+")


def vars_key(execution_id: str, name: str) -> str | None:
    """The key of one var, or None when the name cannot be a KV key token."""
    return f"{execution_id}.{name}" if _NAME.fullmatch(name) else None


def changed(before: Mapping[str, JsonValue], after: Mapping[str, JsonValue]) -> JsonObject:
    """The vars that are new or hold a different value."""
    return {k: v for k, v in after.items() if k not in before or before[k] != v}


class VarsStore:
    """Writes vars of executions to KV; opens the bucket on first use."""

    def __init__(self, js: JetStreamContext) -> None:
        self.js = js
        self._kv: KeyValue | None = None

    async def commit_vars(self, execution_id: str, before: Mapping[str, JsonValue],
                          after: Mapping[str, JsonValue]) -> None:
        values = changed(before, after)
        if not values:
            return
        if self._kv is None:
            self._kv = await self.js.key_value(VARS_BUCKET)
        for name, value in values.items():
            key = vars_key(execution_id, name)
            if key is None:
                log.warning("var %r of %s is not stored in %s: a key holds only letters, digits "
                            "and -/_=", name, execution_id, VARS_BUCKET)
                continue
            await self._kv.put(key, jsonutil.dumps(value))

    async def read_vars(self, execution_id: str, skips: Skips | None = None) -> JsonObject:
        """Every var stored for `execution_id` (what `/api/vars/{execution_id}` serves); one
        that does not decode is named in `skips`.
        """
        if self._kv is None:
            self._kv = await self.js.key_value(VARS_BUCKET)
        try:
            # nats-py's key filters are substrings, not subject patterns: check the prefix here.
            keys = await self._kv.keys(filters=[f"{execution_id}."])
        except NoKeysError:
            return {}
        out: JsonObject = {}
        for key in keys:
            if not key.startswith(f"{execution_id}."):
                continue
            entry = await self._kv.get(key)
            if entry.value is None:
                continue
            try:
                out[key.split(".", 1)[1]] = jsonutil.loads(entry.value)
            except ValueError as exc:  # one garbage value leaves the others readable
                (skips if skips is not None else Skips("var")).add(key, exc)
        return out
