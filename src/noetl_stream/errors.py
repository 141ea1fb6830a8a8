"""The one exception tree of noetl-stream.

    NoetlStreamError
    ├── PlaybookError (ValueError)        a playbook cannot be registered; carries every Issue
    ├── YamlSyntaxError (ValueError)      a document is not YAML (or nests/expands past the bounds)
    ├── TemplateError (ValueError)        a template failed to render; names step, field, expression
    ├── CredentialError (ValueError)      a credential is malformed, unknown or cannot be decrypted
    │   └── KeychainError                 a keychain entry cannot be resolved; names the entry
    ├── AccountError (ValueError)         a user name, role or API key is malformed or taken
    │                                     (state/users.py)
    ├── CatalogError (LookupError)        a playbook path or version is not in the catalog
    ├── RestartRefused (ValueError)       an execution cannot be restarted as asked, or is unknown
    ├── ToolError (RuntimeError)          a tool could not run (not an error outcome of the tool)
    ├── InfrastructureError (RuntimeError) NATS or a child process is unreachable or misbehaves
    ├── ApiError                          the HTTP API's answer other than success: status, code,
    │                                     details (api/errors.py, beside the codes it maps)
    └── RemoteError                       a server's error answer, as the CLI's --server client
                                          reads it (cli/remote.py, beside the exit codes)

Each error also subclasses the matching built-in so callers that know nothing of us still
catch it sensibly.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

OutcomeErrorKind = Literal[
    # a tool's own failure, named by what went wrong
    "config", "connection", "credential", "auth", "data", "not_found", "response", "timeout",
    "crash", "missing_extra", "secrets", "playbook", "catalog", "cursor", "extension", "shell",
    "http", "nats", "duckdb", "postgres", "transfer",
    # an HTTP status of 400 or above, as NoETL names them (tools/http.py `status_kind`)
    "rate_limit", "client_error", "server_error",
    # the python tool and its child process
    "python", "import",
    # the pipeline around the tools
    "template", "keychain", "tool", "task", "sink", "pipeline", "poll_timeout",
    # JetStream refused to store the outcome for lack of room, for the whole storage bound
    # (bus/storage.py)
    "storage",
    # the worker around the pipeline (worker/worker.py): a result this step reads is gone from
    # the object store, a command it cannot read, a result it cannot store, a bug of its own
    "result_ref", "command", "result", "internal",
    # outcomes published for a command no worker reported on: no worker serves its pool
    # (server/pools.py), it passed its max deliveries (bus/dead_letters.py), its timer or
    # command vanished (server/stalls.py)
    "pool", "dead_letter", "lost",
]
"""`error.kind` of a failed outcome (events.py `ErrorInfo`, messages.py `outcome_event`); the
router adds its own (`case`, `loop`, `cancelled`, ...) to the errors of steps it fails itself.
"""


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


class YamlSyntaxError(NoetlStreamError, ValueError):
    """A document is not YAML the parser can read; `line` is where, when known."""

    def __init__(self, message: str, line: int | None) -> None:
        super().__init__(message)
        self.line = line


class TemplateError(NoetlStreamError, ValueError):
    """A template could not be rendered. Where it is known, the message starts with the file
    and line of the step or task that holds the template, as parse errors do.
    """

    def __init__(self, message: str, *, expression: str, step: str | None = None,
                 field: str | None = None, file: str | None = None,
                 line: int | None = None) -> None:
        self.reason = message
        self.expression = expression
        self.step = step
        self.field = field
        self.file = file
        self.line = line
        where = []
        if file:
            where.append(f"{file}:{line}:" if line else f"{file}:")
        if step:
            where.append(f'step "{step}"')
        if field:
            where.append(f'field "{field}"')
        prefix = (" ".join(where) + ": ") if where else ""
        super().__init__(f"{prefix}template {expression!r}: {message}")

    def at(self, file: str | None, line: int | None) -> TemplateError:
        """The same error located in `file` at `line` (an existing location is kept: it is
        the more precise one, a task's rather than its step's).
        """
        if self.file:
            return self
        return TemplateError(self.reason, expression=self.expression, step=self.step,
                             field=self.field, file=file, line=line)


class CredentialError(NoetlStreamError, ValueError):
    """A credential is malformed, unknown or cannot be decrypted. Its text never holds a secret."""


class CatalogError(NoetlStreamError, LookupError):
    """A playbook named by catalog path, version or file link is not registered."""


class RestartRefused(NoetlStreamError, ValueError):
    """A restart that cannot be asked for (server/restart.py); `unknown`: no such execution."""

    def __init__(self, message: str, *, unknown: bool = False) -> None:
        super().__init__(message)
        self.unknown = unknown


class ReplayRefused(RestartRefused):
    """A replay that cannot be asked for (server/replays.py); `unknown`: no such execution."""


class KeychainError(CredentialError):
    """A keychain entry could not be resolved. Names the entry, never its material."""

    def __init__(self, entry: str, message: str) -> None:
        self.entry = entry
        super().__init__(f'keychain "{entry}": {message}')


class ToolError(NoetlStreamError, RuntimeError):
    """A tool kind is unknown or its configuration cannot be used."""


class InfrastructureError(NoetlStreamError, RuntimeError):
    """NATS, the embedded server or a child process failed underneath us."""


class BackupError(NoetlStreamError, ValueError):
    """A backup folder cannot be restored as it is (a file missing, cut off or changed); names
    the file and, where it can, the line.
    """
