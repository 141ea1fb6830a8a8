"""Authentication and roles of the HTTP API, and what the account buckets hold (no secret in
clear)."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from datetime import timedelta

import pytest
from api_client import Api, admin_key, running_api

from noetl_stream import jsonutil
from noetl_stream.bus.connection import Bus
from noetl_stream.state.sessions import SessionStore
from noetl_stream.testing.events import stored_messages

pytestmark = pytest.mark.integration

PASSWORD = "tr0ub4dor&3-long-enough"


@pytest.fixture
async def api(bus: Bus) -> AsyncIterator[Api]:
    async with running_api(bus) as api:
        yield api


async def key_for(api: Api, user: str, role: str) -> str:
    assert api.auth is not None
    if await api.auth.users.get(user) is None:
        await api.auth.users.add(user, [role], PASSWORD)
    key, _ = await api.auth.keys.create(user, [role])
    return key


async def test_api_refuses_requests_without_a_valid_token_but_health_is_open(api: Api) -> None:
    status, body = await api.call("GET", "/api/catalog")
    assert status == 401 and body["error"]["code"] == "unauthorized"
    assert (await api.call("GET", "/api/catalog", token="nsk_not-a-key"))[0] == 401
    assert (await api.call("GET", "/api/catalog", token="something-else"))[0] == 401
    assert (await api.call("GET", "/api/catalog", headers={"Authorization": "Basic eDp5"}))[0] == 401
    assert (await api.call("GET", "/metrics"))[0] == 401
    assert (await api.call("GET", "/api/openapi.json"))[0] == 401
    status, health = await api.call("GET", "/health")
    assert status == 200 and health["status"] == "ok" and health["jetstream"] is True
    assert {c["consumer"] for c in health["consumers"]} >= {"noetl-server-requests",
                                                             "noetl-server-router-0"}


async def test_api_viewer_reads_but_may_not_execute_or_write(api: Api) -> None:
    viewer = await key_for(api, "vera", "viewer")
    assert (await api.call("GET", "/api/executions", token=viewer))[0] == 200
    status, body = await api.call("POST", "/api/executions", token=viewer,
                                  json={"playbook_id": "pb_" + "0" * 32})
    assert status == 403
    assert body["error"]["code"] == "forbidden" and body["error"]["details"] == {"permission": "run"}
    assert (await api.call("POST", "/api/catalog", token=viewer, json={"content": "x"}))[0] == 403
    assert (await api.call("PUT", "/api/vars/e1/x", token=viewer, json={"value": 1}))[0] == 403
    operator = await key_for(api, "otto", "operator")
    status, _ = await api.call("POST", "/api/credentials", token=operator,
                               json={"name": "c", "kind": "bearer", "data": {"token": "t"}})
    assert status == 403


async def test_api_password_login_and_stored_hashes_hold_no_secret(api: Api, bus: Bus) -> None:
    assert api.auth is not None
    await api.auth.users.add("pat", ["operator"], PASSWORD)
    raw_user = (await (await bus.js.key_value("noetl_users")).get("pat")).value
    assert PASSWORD.encode() not in raw_user and b"scrypt" in raw_user

    wrong = await api.call("POST", "/api/sessions", json={"user": "pat", "password": "nope"})
    unknown = await api.call("POST", "/api/sessions", json={"user": "nobody", "password": "nope"})
    assert wrong[0] == unknown[0] == 401
    assert wrong[1]["error"]["message"] == unknown[1]["error"]["message"]
    status, login = await api.call("POST", "/api/sessions", json={"user": "pat", "password": PASSWORD})
    assert status == 201 and login["roles"] == ["operator"]

    sessions_kv = await bus.js.key_value("noetl_sessions")
    raw_session = (await sessions_kv.get(login["session_id"])).value
    assert login["token"].encode() not in raw_session
    assert login["token"] not in login["session_id"]

    key = await key_for(api, "pat", "viewer")
    raw_keys = [(await (await bus.js.key_value("noetl_api_keys")).get(k.key_id)).value
                for k in await api.auth.keys.list(user="pat")]
    assert raw_keys and all(key.encode() not in raw for raw in raw_keys)
    # A session opened with a key has the key's roles, not the user's.
    status, keyed = await api.call("POST", "/api/sessions", json={"api_key": key})
    assert status == 201 and keyed["roles"] == ["viewer"]
    assert (await api.call("POST", "/api/sessions", json={"api_key": "nsk_wrong"}))[0] == 401


async def test_api_expired_or_deleted_sessions_and_removed_users_are_refused(api: Api, bus: Bus) -> None:
    assert api.auth is not None
    await api.auth.users.add("sam", ["viewer"], PASSWORD)
    # A session that ended an hour ago (written by a store whose clock is two hours behind).
    past = await SessionStore.open(bus.js, ttl=timedelta(hours=1), clock=lambda: time.time() - 7200)
    old_token, _ = await past.create("sam", ["viewer"])
    status, body = await api.call("GET", "/api/executions", token=old_token)
    assert status == 401 and body["error"]["code"] == "unauthorized"

    _, login = await api.call("POST", "/api/sessions", json={"user": "sam", "password": PASSWORD})
    token = login["token"]
    assert (await api.call("GET", "/api/executions", token=token))[0] == 200
    admin = await admin_key(api)
    # A viewer sees only their own sessions; an admin may look at anyone's and end them.
    assert (await api.call("GET", "/api/sessions", token=token, params={"user": "root"}))[0] == 403
    status, listed = await api.call("GET", "/api/sessions", token=admin, params={"user": "sam"})
    assert status == 200 and [s["session_id"] for s in listed["items"]] == [login["session_id"]]
    assert (await api.call("DELETE", f"/api/sessions/{login['session_id']}", token=admin))[0] == 200
    assert (await api.call("GET", "/api/executions", token=token))[0] == 401

    key = await key_for(api, "sam", "viewer")
    assert (await api.call("GET", "/api/executions", token=key))[0] == 200
    await api.auth.users.remove("sam")
    assert (await api.call("GET", "/api/executions", token=key))[0] == 401


async def test_session_use_slides_its_expiry_at_most_once_per_interval(bus: Bus) -> None:
    now = [1_000_000.0]
    store = await SessionStore.open(bus.js, clock=lambda: now[0])
    token, created = await store.create("u", ["viewer"])
    now[0] += 30  # within the refresh interval: nothing is written
    same = await store.lookup(token)
    assert same is not None and same.expires_at == created.expires_at
    now[0] += 60
    moved = await store.lookup(token)
    assert moved is not None and moved.expires_at == now[0] + created.ttl_s
    assert (await store.get(created.session_id)).expires_at == moved.expires_at  # type: ignore[union-attr]
    now[0] = moved.expires_at + 1
    assert await store.lookup(token) is None
    assert await store.lookup("nss_" + "x" * 43) is None


async def test_api_credential_material_needs_admin_or_worker_and_is_audited(api: Api, bus: Bus) -> None:
    admin = await admin_key(api)
    status, created = await api.call("POST", "/api/credentials", token=admin, json={
        "name": "pg_main", "kind": "postgres",
        "data": {"host": "db", "user": "app", "password": "hunter2", "database": "d"}})
    assert status == 201 and "data" not in created
    status, listed = await api.call("GET", "/api/credentials", token=admin)
    assert status == 200 and [c["name"] for c in listed["items"]] == ["pg_main"]
    assert "hunter2" not in jsonutil.dumps_str(listed)
    status, masked = await api.call("GET", "/api/credentials/pg_main", token=admin)
    assert status == 200 and masked["data"]["password"] == "***" and masked["data"]["host"] == "db"

    viewer = await key_for(api, "vic", "viewer")
    assert (await api.call("GET", "/api/credentials/pg_main", token=viewer))[0] == 200
    status, body = await api.call("GET", "/api/credentials/pg_main", token=viewer,
                                  params={"include_data": "true"})
    assert status == 403 and "hunter2" not in jsonutil.dumps_str(body)
    assert await stored_messages(bus.js, "noetl.events.audit.>") == []

    worker = await key_for(api, "wanda", "worker")
    status, clear = await api.call("GET", "/api/credentials/pg_main", token=worker,
                                   params={"include_data": "true", "execution_id": "e42"})
    assert status == 200 and clear["data"]["password"] == "hunter2"
    audit = await stored_messages(bus.js, "noetl.events.audit.>")
    assert [subject for subject, _ in audit] == ["noetl.events.audit.credential.read"]
    record = jsonutil.loads(audit[0][1])
    assert {k: record[k] for k in ("event_type", "credential", "user", "via", "execution_id")} == {
        "event_type": "credential.read", "credential": "pg_main", "user": "wanda", "via": "api_key",
        "execution_id": "e42"}
    assert b"hunter2" not in audit[0][1]

    assert (await api.call("DELETE", "/api/credentials/pg_main", token=admin))[0] == 200
    assert (await api.call("GET", "/api/credentials/pg_main", token=admin))[0] == 404
    assert (await api.call("DELETE", "/api/credentials/pg_main", token=admin))[0] == 404


async def test_api_without_auth_treats_every_caller_as_admin(bus: Bus) -> None:
    async with running_api(bus, auth=False) as api:
        assert (await api.call("GET", "/api/catalog"))[0] == 200
        status, body = await api.call("POST", "/api/sessions", json={"user": "a", "password": "b"})
        assert status == 404 and "--no-auth" in body["error"]["message"]


async def test_api_throttles_failed_logins_then_lets_the_right_password_in_later(
        api: Api) -> None:
    assert api.auth is not None
    await api.auth.users.add("gus", ["viewer"], PASSWORD)
    assert api.context is not None
    throttle = api.context.login_throttle
    for _ in range(throttle.max_failures):
        assert (await api.call("POST", "/api/sessions",
                               json={"user": "gus", "password": "guess"}))[0] == 401

    # Blocked now, even with the right password: a guesser learns nothing from the answer.
    status, body = await api.call("POST", "/api/sessions", json={"user": "gus", "password": PASSWORD})
    assert status == 429 and body["error"]["code"] == "too_many_requests"
    assert body["error"]["details"]["retry_after_s"] >= 1

    throttle.window_s = 0.0  # the window has passed
    status, login = await api.call("POST", "/api/sessions", json={"user": "gus", "password": PASSWORD})
    assert status == 201 and login["user"] == "gus"


async def test_a_token_of_a_removed_user_stays_dead_when_the_name_returns_even_if_left_behind(
        api: Api) -> None:
    # Only the user record goes (as if `user rm` stopped before deleting keys and sessions):
    # what was made for the old user must not serve the new one of the same name.
    assert api.auth is not None
    await api.auth.users.add("ada", ["admin"], PASSWORD)
    old = await api.auth.users.get("ada")
    assert old is not None
    key, _ = await api.auth.keys.create("ada", ["admin"], user_since=old.created_at)
    _, login = await api.call("POST", "/api/sessions", json={"user": "ada", "password": PASSWORD})
    for token in (key, login["token"]):
        assert (await api.call("GET", "/api/sessions", token=token, params={"user": "x"}))[0] == 200
    await api.auth.users.remove("ada")
    await api.auth.users.add("ada", ["viewer"], PASSWORD)
    for token in (key, login["token"]):
        assert (await api.call("GET", "/api/executions", token=token))[0] == 401
    assert (await api.call("POST", "/api/sessions", json={"api_key": key}))[0] == 401
