"""The secrets tool, and the worker masking its value in every event it publishes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from noetl_stream import jsonutil
from noetl_stream.bus.connection import Bus
from noetl_stream.services import submit_and_watch
from noetl_stream.state.auth_cache import CachedCredentialResolver
from noetl_stream.state.credentials import CredentialStore
from noetl_stream.state.crypto import ENV_SECRET_KEY, SecretBox
from noetl_stream.testing.events import stored_events
from noetl_stream.tools.base import TaskCall, ToolServices
from noetl_stream.tools.secrets import SecretsTool
from playbook_files import read_playbook

pytestmark = pytest.mark.integration

SECRET = "tok-9f8e7d6c5b4a"


@pytest.fixture(autouse=True)
def no_env_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV_SECRET_KEY, raising=False)


def call(**config: Any) -> TaskCall:
    return TaskCall(execution_id="e1", step="s", task="t", kind="secrets", config=config, input={},
                    spec={}, idempotency_key="k")


async def test_secrets_tool_reads_env_and_credentials_and_marks_value(
        bus: Bus, noetl_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    box = SecretBox.from_env(noetl_home)
    await (await CredentialStore.open(bus.js, box)).set("api", "bearer", {"token": SECRET})
    tool = SecretsTool(ToolServices(credentials=CachedCredentialResolver(bus.js, box)))
    monkeypatch.setenv("MY_SECRET", SECRET)

    from_env = await tool.run(call(name="MY_SECRET", provider="env"))
    from_store = await tool.run(call(name="api"))

    assert from_env.ok and from_env.result == {"value": SECRET}
    assert from_store.ok and from_store.result == {"value": SECRET}
    assert from_store.meta["redact"] == ["value"]


async def test_secrets_tool_errors_name_the_secret_only(bus: Bus, noetl_home: Path) -> None:
    tool = SecretsTool(ToolServices(credentials=CachedCredentialResolver(
        bus.js, SecretBox.from_env(noetl_home))))

    unknown = await tool.run(call(name="missing"))
    unset = await tool.run(call(name="NOETL_TEST_UNSET_VAR", provider="env"))
    bad = await tool.run(call(name="x", provider="vault"))

    assert unknown.error is not None and 'no credential named "missing"' in unknown.error["message"]
    assert unset.error is not None and "is not set" in unset.error["message"]
    assert bad.error is not None and 'provider "vault"' in bad.error["message"]


PLAYBOOK = read_playbook("integration", "secrets_tool.yaml")


async def test_secret_value_is_masked_in_every_published_event(
        bus: Bus, services: None, noetl_home: Path) -> None:
    await (await CredentialStore.open(bus.js, SecretBox.from_env(noetl_home))).set(
        "api", "bearer", {"token": SECRET})

    final = await submit_and_watch(bus, playbook_text=PLAYBOOK, playbook_file="secret_use.yaml",
                                   payload={}, on_event=lambda _e: None, timeout_s=30)

    assert final["status"] == "completed", final
    start = final["steps"]["start"]["result"]
    # The pipeline saw the real value; the event carries only its mask.
    assert start == {"length": len(SECRET), "token": "***", "said": "Bearer ***"}
    assert final["result"] == "***"
    assert final["ctx"] == {"token": "***"}
    events = await stored_events(bus.js, final["execution_id"])
    assert events
    assert SECRET not in jsonutil.dumps_str(events)
