"""`secrets`: read one secret for later tasks of the same step. Result `{value}`.

`provider: env` reads the worker's environment variable `name` (never one of the worker's own
`NOETL_STREAM_*` settings); `provider: credential` (the
default) resolves the stored credential `name` and returns its secret field (bearer `token`,
basic `password`, api_key `value`, postgres `dsn` or `password`, generic `value` or all fields).
The outcome marks `value` for redaction: the worker masks it in every event it publishes, so only
tasks of the same step's pipeline see it in clear.
"""

from __future__ import annotations

import os

from noetl_stream.credentials import Credential
from noetl_stream.errors import ToolError
from noetl_stream.jsonutil import JsonValue
from noetl_stream.tools.base import Outcome, TaskCall, ToolServices

PROVIDERS = ("env", "credential")
# The worker's own settings (its NATS password, the credential key) are never a playbook's.
WORKER_SETTINGS_PREFIX = "NOETL_STREAM_"


def is_worker_setting(variable: str) -> bool:
    return variable.upper().startswith(WORKER_SETTINGS_PREFIX)


def worker_setting_refusal(variable: str) -> str:
    return (f'environment variable "{variable}" is a setting of the worker itself '
            f"({WORKER_SETTINGS_PREFIX}*), which no playbook may read")
REDACT = {"redact": ["value"]}


def secret_of(credential: Credential) -> JsonValue:
    """The field of a credential that is the secret itself."""
    data = credential.data
    field = {"bearer": "token", "basic": "password", "api_key": "value"}.get(credential.kind)
    if field is None and credential.kind == "postgres":
        field = "dsn" if data.get("dsn") else "password"
    if field is None:
        return data["value"] if "value" in data else dict(data)
    return data.get(field)


class SecretsTool:
    kind = "secrets"

    def __init__(self, services: ToolServices | None = None) -> None:
        self.services = services or ToolServices()

    async def run(self, call: TaskCall) -> Outcome:
        name = call.config.get("name")
        provider = str(call.config.get("provider") or "credential")
        if not name or not isinstance(name, str):
            return Outcome.failure("secrets task needs a name", "config")
        if provider not in PROVIDERS:
            return Outcome.failure(f'secrets provider "{provider}" is not known; use one of '
                                   f"{', '.join(PROVIDERS)}", "config")
        if provider == "env":
            if is_worker_setting(name):
                return Outcome.failure(worker_setting_refusal(name), "secrets")
            value = os.environ.get(name)
            if value is None:
                return Outcome.failure(f'environment variable "{name}" is not set on this worker',
                                       "secrets")
            return Outcome.success({"value": value}, meta=dict(REDACT))
        if self.services.credentials is None:
            return Outcome.failure(f'secret "{name}": this worker has no credential store', "secrets")
        try:
            credential = await self.services.credentials.resolve(name, execution_id=call.execution_id)
        except ToolError as exc:
            return Outcome.failure(str(exc), "secrets")
        return Outcome.success({"value": secret_of(credential)}, meta=dict(REDACT))

    async def close(self) -> None:
        return None
