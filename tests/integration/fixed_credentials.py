"""A credential resolver over a fixed set, standing in for the worker's credential store in the
tests that call a tool directly."""

from __future__ import annotations

from noetl_stream.credentials import Credential
from noetl_stream.errors import ToolError


class Credentials:
    def __init__(self, **known: Credential) -> None:
        self.known = known
        self.calls: list[tuple[str, str | None]] = []  # (name, execution_id) of every resolve

    async def resolve(self, name: str, *, execution_id: str | None = None) -> Credential:
        self.calls.append((name, execution_id))
        try:
            return self.known[name]
        except KeyError:
            raise ToolError(f'no credential named "{name}"') from None
