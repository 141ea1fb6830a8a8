"""Whether a running playbook may go by the catalog path it claims, for credential scopes.

A credential's scope names playbook paths (`reports/*`), and a playbook's path is its own
`metadata.path`: whoever may start an execution could write `metadata.path: reports/daily` and
borrow what that path may use. A path registered in the catalog (`noetl-stream register`,
`path.<path>.latest`) belongs to the texts registered under it, so the worker binds the claim
before a scope may grant anything to it: the execution's playbook text (its catalog key, from its
state) must be the path's latest registration, or the registration of its own
`metadata.version`. A path nobody registered is taken as claimed, as before (a playbook run from
a file); a playbook known only by its name (no `metadata.path`) cannot be bound.
"""

from __future__ import annotations

from nats.js.errors import KeyNotFoundError, NotFoundError
from nats.js.kv import KeyValue

from noetl_stream import jsonutil
from noetl_stream.bus.connection import Bus
from noetl_stream.dsl.parser import parse_playbook
from noetl_stream.errors import PlaybookError
from noetl_stream.state.catalog import CATALOG_BUCKET, path_key

_CACHE_SIZE = 256


class PathBinding:
    """Answers, per execution, whether its claimed path is its own (cached per process)."""

    def __init__(self, bus: Bus) -> None:
        self.bus = bus
        self._versions: dict[str, str | None] = {}  # catalog key -> its metadata.version

    async def refusal(self, execution_id: str, path: str) -> str | None:
        """Why `execution_id`'s playbook may not go by `path`; None when it may."""
        kv = await self.bus.js.key_value(CATALOG_BUCKET)
        latest = await _value(kv, path_key(path))
        if latest is None:
            return None  # nobody registered the path: the claim stands
        state = await self._state(execution_id)
        if state is None or state.get("playbook_path") != path:
            return None  # the command's path is its name, or no state to bind it with
        key = str(state.get("playbook_key", ""))
        if key == latest:
            return None
        version = await self._version(kv, key)
        if version is not None and await _value(kv, path_key(path, version)) == key:
            return None
        return (f'it claims the catalog path "{path}", which the catalog registers with other '
                "text (register this playbook, or start it by its path)")

    async def _state(self, execution_id: str) -> dict[str, object] | None:
        try:
            msg = await self.bus.js.get_msg("KV_noetl_executions",
                                            subject=f"$KV.noetl_executions.{execution_id}")
        except NotFoundError:
            return None
        value = jsonutil.loads(msg.data) if msg.data else None
        return value if isinstance(value, dict) else None

    async def _version(self, kv: KeyValue, key: str) -> str | None:
        if key not in self._versions:
            text = await _value(kv, key)
            try:
                version = parse_playbook(text).playbook.version if text else None
            except PlaybookError:
                version = None
            self._versions[key] = version
            while len(self._versions) > _CACHE_SIZE:
                del self._versions[next(iter(self._versions))]
        return self._versions[key]


async def _value(kv: KeyValue, key: str) -> str | None:
    try:
        entry = await kv.get(key)
    except KeyNotFoundError:
        return None
    return bytes(entry.value).decode() if entry.value else None
