"""The one exception tree of noetl-stream.

    NoetlStreamError
    ├── PlaybookError (ValueError)        a playbook cannot be registered; carries every Issue
    ├── TemplateError (ValueError)        a template failed to render; names step, field, expression
    ├── RequestError (ValueError)         an execution request is malformed
    ├── CredentialError (ValueError)      a credential is malformed, unknown or cannot be decrypted
    │   └── KeychainError                 a keychain entry cannot be resolved; names the entry
    ├── CatalogError (LookupError)        a playbook path or version is not in the catalog
    ├── ToolError (RuntimeError)          a tool could not run (not an error outcome of the tool)
    └── InfrastructureError (RuntimeError) NATS or a child process is unreachable or misbehaves

Each error also subclasses the matching built-in so callers that know nothing of us still
catch it sensibly.
"""

from __future__ import annotations

from dataclasses import dataclass


class NoetlStreamError(Exception):
    """Base of every error this package raises on purpose."""


@dataclass(frozen=True)
class Issue:
    """One problem found in a playbook, located as precisely as we know."""

    file: str
    line: int | None
    message: str
    step: str | None = None
    field: str | None = None
    severity: str = "error"  # "error" or "warning"

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}" if self.line else self.file
        parts = [where + ":"]
        if self.step is not None:
            parts.append(f'step "{self.step}"')
        if self.field is not None:
            parts.append(f'field "{self.field}":')
        elif self.step is not None:
            parts[-1] += ":"
        if self.severity == "warning":
            parts.append("warning:")
        parts.append(self.message)
        return " ".join(parts)


class PlaybookError(NoetlStreamError, ValueError):
    """A playbook failed validation; `issues` holds every problem found, not just the first."""

    def __init__(self, issues: list[Issue]) -> None:
        self.issues = issues
        errors = [i for i in issues if i.severity == "error"]
        noun = "reason" if len(errors) == 1 else "reasons"
        super().__init__(
            f"playbook is invalid for {len(errors)} {noun}:\n" + "\n".join(str(i) for i in errors)
        )


class TemplateError(NoetlStreamError, ValueError):
    """A template could not be rendered."""

    def __init__(self, message: str, *, expression: str, step: str | None = None,
                 field: str | None = None) -> None:
        self.expression = expression
        self.step = step
        self.field = field
        where = []
        if step:
            where.append(f'step "{step}"')
        if field:
            where.append(f'field "{field}"')
        prefix = (" ".join(where) + ": ") if where else ""
        super().__init__(f"{prefix}template {expression!r}: {message}")


class RequestError(NoetlStreamError, ValueError):
    """An execution request cannot be accepted."""


class CredentialError(NoetlStreamError, ValueError):
    """A credential is malformed, unknown or cannot be decrypted. Its text never holds a secret."""


class CatalogError(NoetlStreamError, LookupError):
    """A playbook named by catalog path, version or file link is not registered."""


class KeychainError(CredentialError):
    """A keychain entry could not be resolved. Names the entry, never its material."""

    def __init__(self, entry: str, message: str) -> None:
        self.entry = entry
        super().__init__(f'keychain "{entry}": {message}')


class ToolError(NoetlStreamError, RuntimeError):
    """A tool kind is unknown or its configuration cannot be used."""


class InfrastructureError(NoetlStreamError, RuntimeError):
    """NATS, the embedded server or a child process failed underneath us."""
