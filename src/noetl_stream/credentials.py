"""A credential's material as tools receive it, and the scope that says who may use it.

Both live here, below `tools/` and `state/`, so the store (state/credentials.py), the resolvers
(state/auth_cache.py, worker/keychain.py) and the tools all import them from one place and none of them
imports another's package for them.

A scope is stored with the credential (`credential set --playbook PATTERN`): the playbooks whose
path (`metadata.path`, else `metadata.name`) may use it, as shell-style patterns (`etl/*`). A
credential stored without one, as every credential written before scopes existed, may be used by
every playbook: that keeps them working, and `credential list` shows them as `any playbook`.
The worker checks the scope on every use and records it as a `credential.used` event
(worker/credential_guard.py).
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, Field

from noetl_stream.jsonutil import JsonObject


@dataclass(frozen=True)
class Credential:
    """A credential's decrypted material, as a tool receives it. Never put it in an event."""

    name: str
    kind: str  # postgres | bearer | basic | api_key | generic | ...
    data: JsonObject


class CredentialScope(BaseModel):
    """Which playbooks may use a credential."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    playbooks: list[str] = Field(
        default_factory=list,
        description="Shell-style patterns over the playbook's path (metadata.path, else its "
        "name): `etl/*`, `reports/daily`. An empty list lets no playbook use the credential.")

    def allows(self, playbook: str | None) -> bool:
        if not playbook:
            return False
        return any(fnmatch.fnmatchcase(playbook, pattern) for pattern in self.playbooks)

    def describe(self) -> str:
        return ", ".join(self.playbooks) if self.playbooks else "no playbook"
