"""Credential scopes, enforced on the worker: every use is checked and recorded.

A use is a tool resolving an `auth:` name (http, postgres, duckdb, transfer, the `secrets`
tool) or a keychain entry naming a stored credential (`kind: credential`, oauth2 with
`credential`), whether the material then comes from the store or the auth cache. Each one:

1. reads the credential's scope from its record (no decryption);
2. publishes `credential.used` on the execution's events with the playbook, step, credential and
   whether it was `granted`;
3. refuses a credential whose scope does not name the playbook: the task fails with kind
   `credential_scope`, and nothing of the material is read.

The command being run is known from a context variable the worker sets around its pipeline
(`running_command`), so tools need no new arguments.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from contextvars import ContextVar, Token
from dataclasses import dataclass

from noetl_stream.bus.connection import Bus
from noetl_stream.bus.publish import publish_event
from noetl_stream.credentials import Credential, CredentialScope
from noetl_stream.errors import CredentialError, ToolError
from noetl_stream.state.credentials import CredentialStore
from noetl_stream.state.crypto import SecretBox
from noetl_stream.tools.base import CredentialResolver
from noetl_stream.worker.path_binding import PathBinding

USED = "credential.used"


class CredentialScopeError(ToolError):
    """The credential's scope does not name the playbook that asked for it."""


@dataclass(frozen=True)
class CommandInUse:
    execution_id: str
    playbook: str | None
    step: str
    step_run_id: str | None = None
    iteration: int | None = None
    parent_execution_id: str | None = None


_CURRENT: ContextVar[CommandInUse | None] = ContextVar("noetl_command_in_use", default=None)


def running_command(command: CommandInUse) -> contextlib.AbstractContextManager[None]:
    """`command` is the one in use within the block (a plain class: every command enters it)."""
    return _InUse(command)


class _InUse(contextlib.AbstractContextManager[None]):
    __slots__ = ("_command", "_token")

    def __init__(self, command: CommandInUse) -> None:
        self._command = command
        self._token: Token[CommandInUse | None] | None = None

    def __enter__(self) -> None:
        self._token = _CURRENT.set(self._command)

    def __exit__(self, *exc: object) -> None:
        if self._token is not None:
            _CURRENT.reset(self._token)


class CredentialGuard:
    def __init__(self, bus: Bus, box: SecretBox) -> None:
        self.bus = bus
        self.box = box
        self._store: CredentialStore | None = None
        self._binding = PathBinding(bus)

    async def _scope(self, name: str) -> CredentialScope | None:
        if self._store is None:
            self._store = await CredentialStore.open(self.bus.js, self.box)
        info = await self._store.info(name)
        return info.scope if info is not None else None

    async def admit(self, name: str, *, via: str) -> None:
        """Check `name`'s scope for the running command and record the use; raise when the
        scope refuses it. An unknown name passes here: the resolver then says it is unknown.
        """
        use = _CURRENT.get()
        try:
            scope = await self._scope(name)
        except CredentialError as exc:
            raise ToolError(f'credential "{name}": {exc}') from None
        granted = scope is None or (use is not None and scope.allows(use.playbook))
        # A scope grants to a path only when the playbook is that path's own (path_binding.py).
        unbound = await self._binding.refusal(use.execution_id, use.playbook) \
            if scope is not None and granted and use is not None and use.playbook else None
        granted = granted and unbound is None
        if use is not None:
            await self._record(use, name, via, granted, scope)
        if not granted:
            playbook = use.playbook if use is not None else None
            raise CredentialScopeError(
                f'credential "{name}" may not be used by playbook "{playbook or "?"}": '
                + (unbound or f"its scope allows {scope.describe() if scope else 'every playbook'}"))

    async def _record(self, use: CommandInUse, name: str, via: str, granted: bool,
                      scope: CredentialScope | None) -> None:
        body = {"event_type": USED, "execution_id": use.execution_id, "step": use.step,
                "step_run_id": use.step_run_id, "iteration": use.iteration,
                "parent_execution_id": use.parent_execution_id, "timestamp": time.time(),
                "credential": name, "playbook": use.playbook, "via": via, "granted": granted,
                "scoped": scope is not None}
        # Every use is its own event: a redelivered command's uses are uses again.
        msg_id = f"evt:{use.execution_id}:{USED}:{uuid.uuid4().hex}"
        await publish_event(self.bus, use.execution_id, USED, msg_id, body)


class ScopedCredentialResolver:
    """The resolver tools get: the guard first, then the auth cache and the store."""

    def __init__(self, inner: CredentialResolver, guard: CredentialGuard) -> None:
        self.inner = inner
        self.guard = guard

    async def resolve(self, name: str, *, execution_id: str | None = None) -> Credential:
        await self.guard.admit(name, via="auth")
        return await self.inner.resolve(name, execution_id=execution_id)
