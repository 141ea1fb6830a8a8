"""`keychain:` on a real nats-server: every kind reaches templates, oauth2 tokens are fetched once
per execution and again after they expire, and no resolved secret lands in an event or in the
execution state."""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from noetl_stream import jsonutil
from noetl_stream.bus.connection import Bus
from noetl_stream.services import submit_and_watch
from noetl_stream.state.credentials import CredentialStore
from noetl_stream.state.crypto import ENV_SECRET_KEY, SecretBox
from noetl_stream.testing.events import stored_events
from playbook_files import fill, read_playbook

pytestmark = pytest.mark.integration

CLIENT_ID = "client-7"
CLIENT_SECRET = "client-secret-5c4b3a2918"
ENV_SECRET = "env-secret-0a1b2c3d4e"
STORED_TOKEN = "stored-token-9z8y7x6w"


@pytest.fixture(autouse=True)
def no_env_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV_SECRET_KEY, raising=False)


@dataclass
class TokenService:
    """A client-credentials token endpoint and an API that wants its tokens."""

    url: str = ""
    expires_in: int = 3600
    issued: list[str] = field(default_factory=list)
    forms: list[dict[str, str]] = field(default_factory=list)

    @property
    def current(self) -> str:
        return self.issued[-1] if self.issued else ""


@pytest.fixture
async def tokens() -> AsyncIterator[TokenService]:
    service = TokenService()

    async def token(request: web.Request) -> web.Response:
        form = dict(await request.post())
        service.forms.append({k: str(v) for k, v in form.items()})
        basic = base64.b64encode(f"{CLIENT_ID}:{CLIENT_SECRET}".encode()).decode()
        in_body = form.get("client_id") == CLIENT_ID and form.get("client_secret") == CLIENT_SECRET
        if request.headers.get("Authorization") != f"Basic {basic}" and not in_body:
            return web.json_response({"error": "invalid_client"}, status=401)
        service.issued.append(f"access-{len(service.issued) + 1}-f00dfeed")
        return web.json_response({"access_token": service.current, "token_type": "Bearer",
                                  "expires_in": service.expires_in})

    async def protected(request: web.Request) -> web.Response:
        ok = request.headers.get("Authorization") == f"Bearer {service.current}"
        return web.json_response({"authorized": ok, "seen": request.headers.get("Authorization")},
                                 status=200 if ok else 401)

    app = web.Application()
    app.router.add_post("/token", token)
    app.router.add_get("/protected", protected)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    service.url = str(server.make_url("")).rstrip("/")
    try:
        yield service
    finally:
        await server.close()


async def _store(bus: Bus, home: Path, name: str, kind: str, data: dict[str, Any]) -> None:
    await (await CredentialStore.open(bus.js, SecretBox.from_env(home))).set(name, kind, data)


async def _run(bus: Bus, playbook: str, payload: dict[str, Any] | None = None) -> dict[str, Any]:
    return await submit_and_watch(bus, playbook_text=playbook, playbook_file="keychain.yaml",
                                  payload=payload or {}, on_event=lambda _e: None, timeout_s=30)


async def _stored_text(bus: Bus, execution_id: str) -> str:
    """Everything the execution left in the event log and in KV `noetl_executions`."""
    events = await stored_events(bus.js, execution_id)
    state = await (await bus.js.key_value("noetl_executions")).get(execution_id)
    return jsonutil.dumps_str(events) + bytes(state.value or b"").decode()


OAUTH_PLAYBOOK = read_playbook("integration", "keychain_oauth.yaml")


async def test_oauth2_token_is_fetched_once_per_execution_and_never_stored_in_clear(
        bus: Bus, services: None, noetl_home: Path, tokens: TokenService) -> None:
    await _store(bus, noetl_home, "oauth_client", "generic",
                 {"client_id": CLIENT_ID, "client_secret": CLIENT_SECRET})

    final = await _run(bus, fill(OAUTH_PLAYBOOK, url=tokens.url, pause=0))

    assert final["status"] == "completed", final
    assert final["steps"]["start"]["result"]["authorized"] is True
    assert final["steps"]["again"]["result"]["authorized"] is True
    assert final["steps"]["start"]["result"]["seen"] == "Bearer ***"  # masked in the event
    assert len(tokens.issued) == 1
    assert tokens.forms[0] == {"grant_type": "client_credentials", "scope": "read"}
    stored = await _stored_text(bus, final["execution_id"])
    for secret in (tokens.current, CLIENT_SECRET):
        assert secret not in stored
    raw_cache = [e.value for e in await _auth_cache_entries(bus)]
    assert raw_cache and not any(tokens.current.encode() in v for v in raw_cache)


async def _auth_cache_entries(bus: Bus) -> list[Any]:
    kv = await bus.js.key_value("noetl_auth_cache")
    return [await kv.get(k) for k in await kv.keys()]


async def test_oauth2_token_is_fetched_again_after_it_expires(
        bus: Bus, services: None, noetl_home: Path, tokens: TokenService) -> None:
    await _store(bus, noetl_home, "oauth_client", "generic",
                 {"client_id": CLIENT_ID, "client_secret": CLIENT_SECRET})
    tokens.expires_in = 1  # cached for 0.9 s: the pause outlives it

    final = await _run(bus, fill(OAUTH_PLAYBOOK, url=tokens.url, pause=1.5))

    assert final["status"] == "completed", final
    assert len(tokens.issued) == 2
    assert final["steps"]["again"]["result"]["authorized"] is True


async def test_a_new_execution_fetches_its_own_token(
        bus: Bus, services: None, noetl_home: Path, tokens: TokenService) -> None:
    await _store(bus, noetl_home, "oauth_client", "generic",
                 {"client_id": CLIENT_ID, "client_secret": CLIENT_SECRET})
    playbook = fill(OAUTH_PLAYBOOK, url=tokens.url, pause=0)

    first, second = await _run(bus, playbook), await _run(bus, playbook)

    assert first["status"] == second["status"] == "completed"
    assert len(tokens.issued) == 2


async def test_rejected_client_fails_the_first_step_naming_the_entry(
        bus: Bus, services: None, noetl_home: Path, tokens: TokenService) -> None:
    await _store(bus, noetl_home, "oauth_client", "generic",
                 {"client_id": CLIENT_ID, "client_secret": "wrong-secret-1234"})

    final = await _run(bus, fill(OAUTH_PLAYBOOK, url=tokens.url, pause=0))

    assert final["status"] == "failed"
    message = final["error"]["message"]
    assert message.startswith('step "start" failed: keychain "api": token endpoint ')
    assert "HTTP 401" in message and "invalid_client" in message
    assert "wrong-secret-1234" not in await _stored_text(bus, final["execution_id"])
    assert "pause" not in final["steps"]


KINDS_PLAYBOOK = read_playbook("integration", "keychain_kinds.yaml")


async def test_static_env_credential_and_bearer_entries_reach_templates_masked(
        bus: Bus, services: None, noetl_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KEYCHAIN_TEST_SECRET", ENV_SECRET)
    await _store(bus, noetl_home, "api_token", "bearer", {"token": STORED_TOKEN})

    final = await _run(bus, KINDS_PLAYBOOK)

    assert final["status"] == "completed", final
    assert final["result"] == {"region": "eu-west-1", "retries": 3, "env_ok": True, "same": True,
                               "kind": "bearer", "stored_len": len(STORED_TOKEN),
                               "derived": "***"}
    assert final["ctx"]["leak"] == "***"
    stored = await _stored_text(bus, final["execution_id"])
    for secret in (ENV_SECRET, STORED_TOKEN):
        assert secret not in stored


async def test_unset_env_variable_fails_the_step_naming_entry_and_variable(
        bus: Bus, services: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KEYCHAIN_TEST_SECRET", raising=False)
    final = await _run(bus, KINDS_PLAYBOOK)

    assert final["status"] == "failed"
    assert final["error"]["step"] == "start"
    assert final["error"]["message"] == ('step "start" failed: keychain "envs": environment '
                                         'variable "KEYCHAIN_TEST_SECRET" is not set on this worker')


async def test_noetl_keychain_spellings_static_map_bearer_access_token_and_credential_ref(
        bus: Bus, services: None, noetl_home: Path) -> None:
    await _store(bus, noetl_home, "api_token", "bearer", {"token": STORED_TOKEN})

    final = await _run(bus, read_playbook("integration", "keychain_noetl_forms.yaml"))

    assert final["status"] == "completed", final
    assert final["result"] == {"region": "eu-west-1", "retries": 3, "header_ok": True,
                               "stored_kind": "bearer"}


async def test_oauth2_in_noetls_python_form_posts_its_client_and_authorizes_the_request(
        bus: Bus, services: None, tokens: TokenService) -> None:
    playbook = read_playbook("integration", "keychain_oauth_noetl_form.yaml", url=tokens.url,
                             client_id=CLIENT_ID, client_secret=CLIENT_SECRET)

    final = await _run(bus, playbook)

    assert final["status"] == "completed", final
    assert final["steps"]["start"]["result"]["authorized"] is True
    assert tokens.forms == [{"grant_type": "client_credentials", "scope": "read",
                             "client_id": CLIENT_ID, "client_secret": CLIENT_SECRET}]
