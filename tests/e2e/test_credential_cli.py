"""`noetl-stream credential ...` and `run` with `auth:` through the real CLI, on one home.

The test starts the home's embedded nats-server itself, so every CLI call reuses it and the test
can read the execution's events afterwards and look for the secret where it must not be.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from local_http import HttpService
from noetl_stream import jsonutil
from noetl_stream.bus.connection import connect
from noetl_stream.bus.nats_server import NatsServer, start_nats_server
from noetl_stream.state.crypto import ENV_SECRET_KEY
from noetl_stream.testing.events import stored_events
from playbook_files import read_playbook

pytestmark = pytest.mark.e2e

CLI = str(Path(sys.executable).parent / "noetl-stream")
SECRET = "s3cret-value-e2e"


@dataclass
class Ran:
    code: int
    out: str
    err: str


async def cli(*args: str) -> Ran:
    # Asynchronous, so the aiohttp echo server in this event loop keeps answering meanwhile.
    proc = await asyncio.create_subprocess_exec(CLI, *args, stdout=asyncio.subprocess.PIPE,
                                                stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), timeout=60)
    assert proc.returncode is not None
    return Ran(proc.returncode, out.decode(), err.decode())


@pytest.fixture
async def home_nats(noetl_home: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[NatsServer]:
    monkeypatch.delenv(ENV_SECRET_KEY, raising=False)
    server = await start_nats_server(noetl_home / "nats")
    try:
        yield server
    finally:
        await server.stop()


def playbook(tmp_path: Path, url: str) -> Path:
    path = tmp_path / "bearer.yaml"
    path.write_text(read_playbook("e2e", "credential_cli_bearer.yaml", url=url))
    return path


async def test_credential_cli_round_trip_and_bearer_run(home_nats: NatsServer, tmp_path: Path,
                                                       http_service: HttpService) -> None:
    data = '{"token": "' + SECRET + '"}'
    saved = await cli("credential", "set", "api_token", "--kind", "bearer", "--data", data,
                      "--description", "echo api", "--tag", "test")
    assert saved.code == 0, saved.err
    assert SECRET not in saved.out + saved.err

    listed = await cli("credential", "list")
    assert listed.code == 0 and "api_token" in listed.out and "bearer" in listed.out
    assert SECRET not in listed.out + listed.err

    masked = await cli("credential", "get", "api_token")
    assert masked.code == 0
    assert jsonutil.loads(masked.out)["data"] == {"token": "***"}
    assert SECRET not in masked.out + masked.err

    shown = await cli("credential", "get", "api_token", "--show-secrets")
    assert jsonutil.loads(shown.out)["data"] == {"token": SECRET}

    ran = await cli("run", str(playbook(tmp_path, http_service.url)), "--json")
    assert ran.code == 0, ran.err
    summary = jsonutil.loads(ran.out)
    # The echo server reflecting the header is the user's own data: it stays in the result.
    echoed = summary["steps"]["start"]["result"]["headers"]
    assert echoed["Authorization"] == f"Bearer {SECRET}"
    # A value read with the secrets tool is masked once it leaves the step.
    assert summary["steps"]["reveal"]["result"] == "***"
    assert SECRET not in ran.err

    bus = await connect(home_nats.url)
    try:
        events = await stored_events(bus.js, summary["execution_id"])
    finally:
        await bus.close()
    assert any(e["event_type"] == "execution.completed" for e in events)
    # The only place the secret may appear is the echoed header inside the http step's result.
    text = jsonutil.dumps_str(events)
    echo = f'"Authorization":"Bearer {SECRET}"'
    assert text.count(echo) >= 1
    assert text.count(SECRET) == text.count(echo)

    removed = await cli("credential", "rm", "api_token")
    assert removed.code == 0
    gone = await cli("credential", "get", "api_token")
    assert gone.code == 2 and 'no credential named "api_token"' in gone.err


async def test_run_with_unknown_credential_fails_naming_it(home_nats: NatsServer, tmp_path: Path,
                                                          http_service: HttpService) -> None:
    ran = await cli("run", str(playbook(tmp_path, http_service.url)), "--json")

    assert ran.code == 1
    error = jsonutil.loads(ran.out)["error"]["message"]
    assert 'no credential named "api_token"' in error
    assert http_service.calls["echo"] == 0


async def test_credential_set_rejects_bad_input_with_exit_2(home_nats: NatsServer,
                                                            tmp_path: Path) -> None:
    bad_kind = await cli("credential", "set", "x", "--kind", "berer", "--data", '{"token": "t"}')
    bad_json = await cli("credential", "set", "x", "--kind", "bearer", "--data", "{" + SECRET)
    missing_file = await cli("credential", "set", "x", "--kind", "bearer",
                             "--data", f"@{tmp_path / 'nope.json'}")
    bad_field = await cli("credential", "set", "x", "--kind", "basic", "--data",
                          '{"username": "u", "pasword": "' + SECRET + '"}')

    for ran in (bad_kind, bad_json, missing_file, bad_field):
        assert ran.code == 2, ran.err
        assert SECRET not in ran.out + ran.err
    assert 'did you mean "bearer"' in bad_kind.err
    assert "not valid JSON" in bad_json.err
    assert "cannot read" in missing_file.err
    assert 'did you mean "password"' in bad_field.err


async def test_credential_a_newer_release_stored_is_one_line_and_exit_2(
        home_nats: NatsServer) -> None:
    assert (await cli("credential", "list")).code == 0  # provisions the store
    bus = await connect(home_nats.url, name="newer-record")
    try:
        record = {"schema_version": 99, "name": "later", "kind": "bearer", "tags": [],
                  "created_at": "2026-11-26T12:00:00Z", "updated_at": "2026-11-26T12:00:00Z",
                  "data": "sealed"}
        await (await bus.js.key_value("noetl_credentials")).put("later", jsonutil.dumps(record))
    finally:
        await bus.close()
    got = await cli("credential", "get", "later")
    assert got.code == 2
    assert got.err.strip() == ("noetl-stream: credential has schema version 99; this release "
                               "reads versions up to 2: it is left as it is for a release that "
                               "reads it")
