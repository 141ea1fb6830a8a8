"""The credential store, its encryption at rest, and the auth cache, on a real nats-server."""

from __future__ import annotations

import asyncio
import stat
from datetime import timedelta
from pathlib import Path

import pytest
from nats.js.errors import KeyNotFoundError

from noetl_stream.bus.connection import Bus
from noetl_stream.credentials import Credential
from noetl_stream.errors import CredentialError, ToolError
from noetl_stream.state.auth_cache import AuthCache, CachedCredentialResolver
from noetl_stream.state.credentials import CredentialStore, mask
from noetl_stream.state.crypto import ENV_SECRET_KEY, SecretBox, generate_key
from noetl_stream.state.records import Skips
from noetl_stream.testing.waiting import assert_eventually

pytestmark = pytest.mark.integration

SECRET = "s3cret-value-for-tests"


@pytest.fixture(autouse=True)
def no_env_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV_SECRET_KEY, raising=False)


@pytest.fixture
def box(noetl_home: Path) -> SecretBox:
    return SecretBox.from_env(noetl_home)


@pytest.fixture
async def store(bus: Bus, box: SecretBox) -> CredentialStore:
    return await CredentialStore.open(bus.js, box)


async def test_store_round_trips_material_and_keeps_created_at(store: CredentialStore) -> None:
    first = await store.set("api", "bearer", {"token": SECRET}, description="d", tags=["a", "b"])
    again = await store.set("api", "bearer", {"token": SECRET + "2"})

    got = await store.get("api")
    assert got == Credential(name="api", kind="bearer", data={"token": SECRET + "2"})
    assert again.created_at == first.created_at
    assert again.updated_at >= first.updated_at
    assert first.tags == ["a", "b"] and first.description == "d"


async def test_store_keeps_material_encrypted_at_rest(store: CredentialStore, bus: Bus) -> None:
    await store.set("api", "basic", {"username": "ann", "password": SECRET})

    raw = (await (await bus.js.key_value("noetl_credentials")).get("api")).value
    assert raw is not None
    assert SECRET.encode() not in raw
    assert b"ann" not in raw  # every field of the material is sealed, not only the password


async def test_key_file_is_created_once_with_mode_0600(store: CredentialStore, noetl_home: Path) -> None:
    key_file = noetl_home / "secret.key"
    assert not key_file.exists()

    await store.set("api", "bearer", {"token": SECRET})

    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    content = key_file.read_text()
    await store.set("other", "bearer", {"token": SECRET})
    assert key_file.read_text() == content


async def test_env_key_is_used_instead_of_a_key_file(bus: Bus, noetl_home: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV_SECRET_KEY, generate_key())
    store = await CredentialStore.open(bus.js, SecretBox.from_env(noetl_home))

    await store.set("api", "bearer", {"token": SECRET})

    assert not (noetl_home / "secret.key").exists()
    assert (await store.get("api")) is not None


async def test_wrong_key_fails_without_revealing_anything(store: CredentialStore, bus: Bus,
                                                          noetl_home: Path) -> None:
    await store.set("api", "bearer", {"token": SECRET})
    stranger = await CredentialStore.open(bus.js, SecretBox(noetl_home, key=generate_key()))

    with pytest.raises(CredentialError) as caught:
        await stranger.get("api")
    assert SECRET not in str(caught.value)
    assert "cannot decrypt" in str(caught.value)


async def test_rotate_key_reencrypts_with_the_first_key(bus: Bus, noetl_home: Path) -> None:
    old, new = generate_key(), generate_key()
    await (await CredentialStore.open(bus.js, SecretBox(noetl_home, key=old))).set(
        "api", "bearer", {"token": SECRET})

    both = await CredentialStore.open(bus.js, SecretBox(noetl_home, key=f"{new},{old}"))
    assert await both.rotate_key(Skips("credential")) == 1

    only_new = await CredentialStore.open(bus.js, SecretBox(noetl_home, key=new))
    got = await only_new.get("api")
    assert got is not None and got.data == {"token": SECRET}


async def test_invalid_material_names_fields_never_values(store: CredentialStore) -> None:
    with pytest.raises(CredentialError) as caught:
        await store.set("pg", "postgres", {"host": "db", "port": SECRET, "pasword": SECRET})
    message = str(caught.value)
    assert SECRET not in message
    assert 'field "port"' in message
    assert 'unknown field "pasword"; did you mean "password"?' in message

    with pytest.raises(CredentialError, match='unknown credential kind "berer"; did you mean "bearer"'):
        await store.set("x", "berer", {"token": SECRET})
    with pytest.raises(CredentialError, match='needs "dsn", or "host"'):
        await store.set("pg", "postgres", {"user": "u"})
    with pytest.raises(CredentialError, match="name"):
        await store.set("bad name", "bearer", {"token": SECRET})


async def test_postgres_aliases_are_normalized(store: CredentialStore) -> None:
    await store.set("pg", "postgres", {"db_host": "h", "db_port": "5432", "db_user": "u",
                                       "db_password": SECRET, "db_name": "d"})

    got = await store.get("pg")
    assert got is not None
    assert got.data == {"host": "h", "port": 5432, "user": "u", "password": SECRET, "database": "d"}


async def test_list_has_no_material_and_mask_hides_secret_fields(store: CredentialStore) -> None:
    await store.set("b", "basic", {"username": "ann", "password": SECRET})
    await store.set("a", "api_key", {"header": "X-Token", "value": SECRET})

    listed = await store.list()
    assert [i.name for i in listed] == ["a", "b"]
    assert SECRET not in repr([i.model_dump() for i in listed])
    assert mask("basic", {"username": "ann", "password": SECRET}) == {"username": "ann", "password": "***"}
    assert mask("generic", {"anything": SECRET}) == {"anything": "***"}


async def test_delete_removes_the_credential_and_its_history(store: CredentialStore, bus: Bus) -> None:
    await store.set("api", "bearer", {"token": SECRET})

    assert await store.delete("api") is True
    assert await store.get("api") is None
    assert await store.delete("api") is False
    history = await (await bus.js.key_value("noetl_credentials")).history("api")
    assert all(SECRET.encode() not in (e.value or b"") for e in history)
    assert all(not e.value for e in history)


# -- auth cache ------------------------------------------------------------------------------

async def test_auth_cache_entry_expires_after_its_ttl(bus: Bus, box: SecretBox) -> None:
    cache = await AuthCache.open(bus.js, box, ttl=timedelta(seconds=1))
    assert cache.server_ttl  # the KV stream allows per-message TTL
    await cache.put(Credential("api", "bearer", {"token": SECRET}))
    assert await cache.entry("api") is not None

    async def gone() -> None:
        assert await cache.get("api") is None

    await assert_eventually(gone, timeout_s=5)

    async def dropped_by_server() -> None:
        try:
            await cache.kv.get("global.api")
        except KeyNotFoundError:
            return
        raise AssertionError("the server still holds the expired entry")

    await assert_eventually(dropped_by_server, timeout_s=5)


async def test_auth_cache_counts_concurrent_accesses_exactly(bus: Bus, box: SecretBox) -> None:
    cache = await AuthCache.open(bus.js, box)
    await cache.put(Credential("api", "bearer", {"token": SECRET}), execution_id="e1")

    got = await asyncio.gather(*(cache.get("api", execution_id="e1") for _ in range(25)))

    assert all(g is not None and g.data == {"token": SECRET} for g in got)
    entry = await cache.entry("api", execution_id="e1")
    assert entry is not None
    assert entry.access_count == 25
    assert entry.scope_type == "execution"
    assert entry.accessed_at >= entry.created_at


async def test_auth_cache_keeps_material_encrypted_and_scoped(bus: Bus, box: SecretBox) -> None:
    cache = await AuthCache.open(bus.js, box)
    await cache.put(Credential("api", "bearer", {"token": SECRET}), execution_id="e1")

    raw = (await cache.kv.get("execution.e1.api")).value
    assert raw is not None and SECRET.encode() not in raw
    assert await cache.get("api", execution_id="e2") is None
    assert await cache.get("api") is None

    await cache.invalidate("api")
    assert await cache.get("api", execution_id="e1") is None


async def test_resolver_goes_through_the_cache_and_hides_unknown_names(
        bus: Bus, box: SecretBox, store: CredentialStore) -> None:
    await store.set("api", "bearer", {"token": SECRET})
    resolver = CachedCredentialResolver(bus.js, box)

    first = await resolver.resolve("api", execution_id="e1")
    second = await resolver.resolve("api", execution_id="e1")

    assert first == second == Credential("api", "bearer", {"token": SECRET})
    entry = await (await AuthCache.open(bus.js, box)).entry("api", execution_id="e1")
    assert entry is not None and entry.access_count == 1
    with pytest.raises(ToolError, match='no credential named "missing"'):
        await resolver.resolve("missing", execution_id="e1")
