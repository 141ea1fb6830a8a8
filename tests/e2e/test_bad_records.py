"""One record that no longer decodes (a heartbeat, an execution state, a credential) is skipped
and named by every view that lists its bucket, and the rest of the view works: `/health` and
`GET /api/executions` of `server --http`, `executions list`, `credential list`, `rotate-key` and
`rm` through the real console script on a real nats-server."""

from __future__ import annotations

import asyncio
import signal
import socket
from typing import Any

import aiohttp
import pytest
from cli import CLI, run_cli

from noetl_stream.bus.connection import Bus
from noetl_stream.bus.nats_server import NatsServer
from noetl_stream.services import run_services, submit_and_watch
from noetl_stream.testing.waiting import assert_eventually

pytestmark = pytest.mark.e2e

HELLO = """\
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: hello}
workflow:
  - step: start
    tool: {kind: noop}
"""
GARBAGE = b'{"status": "runn\xff'


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


async def _garbage_beside_good_records(bus: Bus) -> str:
    async with run_services(bus, python_children=1):
        final = await submit_and_watch(bus, playbook_text=HELLO, playbook_file="hello.yaml",
                                       payload={}, on_event=lambda _e: None, timeout_s=30)
    assert final["status"] == "completed"
    await (await bus.js.key_value("noetl_runtime")).put("worker.default.garbage", GARBAGE)
    await (await bus.js.key_value("noetl_executions")).put("garbage1", GARBAGE)
    good = str(final["execution_id"])
    await (await bus.js.key_value("noetl_vars")).put(f"{good}.junk", GARBAGE)
    await (await bus.js.key_value("noetl_catalog")).put("path.junk.latest", b"\xff\xfe")
    await (await bus.js.key_value("noetl_users")).put("mallory", GARBAGE)
    return good


async def _get(http: aiohttp.ClientSession, url: str) -> tuple[int, Any]:
    async with http.get(url) as resp:
        return resp.status, await resp.json()


async def test_the_http_views_skip_a_bad_record_and_name_it(bus: Bus,
                                                            nats_server: NatsServer) -> None:
    nats_url = nats_server.url
    good = await _garbage_beside_good_records(bus)
    port = free_port()
    server = await asyncio.create_subprocess_exec(
        str(CLI), "server", "--nats-url", nats_url, "--http", f"127.0.0.1:{port}", "--no-auth",
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE)
    base = f"http://127.0.0.1:{port}"
    try:
        async with aiohttp.ClientSession() as http:
            async def answering() -> None:
                try:
                    await _get(http, base + "/api/executions")
                except aiohttp.ClientConnectionError as exc:
                    raise AssertionError("not listening yet") from exc

            await assert_eventually(answering, timeout_s=30, interval_s=0.2)
            health_status, health = await _get(http, base + "/health")
            list_status, listed = await _get(http, base + "/api/executions")
            vars_status, variables = await _get(http, base + f"/api/vars/{good}")
            catalog_status, catalog = await _get(http, base + "/api/catalog")
            async with http.delete(base + "/api/catalog/junk") as resp:
                junk_removed = resp.status
    finally:
        server.send_signal(signal.SIGTERM)
        _, err = await asyncio.wait_for(server.communicate(), 30)

    assert health_status in (200, 503), health
    assert [s["key"] for s in health["skipped"]] == ["worker.default.garbage"]
    assert list_status == 200, listed
    assert [i["execution_id"] for i in listed["items"]] == [good]
    assert [s["key"] for s in listed["skipped"]] == ["garbage1"]
    assert "'garbage1' skipped" in err.decode()  # and the server's log names it
    assert vars_status == 200 and [s["key"] for s in variables["skipped"]] == [f"{good}.junk"]
    assert catalog_status == 200 and [s["key"] for s in catalog["skipped"]] == ["path.junk.latest"]
    assert junk_removed == 200  # and the entry that does not decode can be removed


async def test_the_cli_views_skip_a_bad_record_and_name_it(bus: Bus,
                                                           nats_server: NatsServer) -> None:
    nats_url = nats_server.url
    good = await _garbage_beside_good_records(bus)
    url = ["--nats-url", nats_url]

    listed = await run_cli("executions", "list", *url)
    purge = await run_cli("executions", "purge", "--older-than", "1s", "--dry-run", *url)
    users = await run_cli("user", "list", *url)
    removed = await run_cli("user", "rm", "mallory", *url)

    assert listed.returncode == 0, listed.stderr
    assert good in listed.stdout and "garbage1" in listed.stderr
    assert "Traceback" not in listed.stderr
    assert purge.returncode == 0 and good in purge.stdout, purge.stdout + purge.stderr
    assert users.returncode == 0 and "mallory" in users.stderr, users.stdout + users.stderr
    assert removed.returncode == 0, removed.stderr


async def test_credential_commands_go_on_past_a_bad_credential(bus: Bus,
                                                              nats_server: NatsServer) -> None:
    nats_url = nats_server.url
    url = ["--nats-url", nats_url]
    for name in ("alpha", "omega"):
        made = await run_cli("credential", "set", name, "--kind", "bearer", "--data",
                             '{"token": "t0ken"}', *url)
        assert made.returncode == 0, made.stderr
    await (await bus.js.key_value("noetl_credentials")).put("broken", GARBAGE)

    listed = await run_cli("credential", "list", *url)
    rotated = await run_cli("credential", "rotate-key", *url)
    removed = await run_cli("credential", "rm", "alpha", *url)
    removed_bad = await run_cli("credential", "rm", "broken", *url)
    after = await run_cli("credential", "list", "--json", *url)

    assert listed.returncode == 0 and "alpha" in listed.stdout and "omega" in listed.stdout
    assert "broken" in listed.stderr and "Traceback" not in listed.stderr
    # The readable ones are re-encrypted; the one left under the old key is named, exit 1.
    assert rotated.returncode == 1, rotated.stderr
    assert "re-encrypted 2 credentials" in rotated.stdout and "broken" in rotated.stderr
    assert removed.returncode == 0 and removed_bad.returncode == 0, removed_bad.stderr
    assert after.returncode == 0 and '"omega"' in after.stdout and "alpha" not in after.stdout
    assert after.stderr == ""
