"""`noetl-stream user` / `apikey` and `server --http` through the real console script: an admin
made on the command line logs in to the API that the server process serves."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import sys
from pathlib import Path

import aiohttp
import pytest

from noetl_stream import jsonutil
from noetl_stream.bus.nats_server import NatsServer
from noetl_stream.testing.waiting import assert_eventually

pytestmark = pytest.mark.e2e

CLI = str(Path(sys.executable).parent / "noetl-stream")


async def cli(*args: str, stdin: bytes | None = None) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        CLI, *args, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(stdin or b""), 60)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


async def test_cli_made_admin_uses_the_api_of_server_http(nats_server: NatsServer) -> None:
    url = ["--nats-url", nats_server.url]
    assert (await cli("init", *url))[0] == 0
    code, _, err = await cli("user", "add", "ada", "--role", "admin", "--password-stdin", *url,
                               stdin=b"a-long-password\n")
    assert code == 0, err
    code, key, err = await cli("apikey", "create", "--user", "ada", "--role", "operator", *url)
    assert code == 0, err
    key = key.strip()
    assert key.startswith("nsk_")
    code, listed, _ = await cli("apikey", "list", "--json", *url)
    assert code == 0 and key not in listed
    assert [k["user"] for k in jsonutil.loads(listed)] == ["ada"]
    assert (await cli("apikey", "create", "--user", "nobody", "--role", "viewer", *url))[0] == 2

    port = free_port()
    server = await asyncio.create_subprocess_exec(
        CLI, "server", *url, "--http", f"127.0.0.1:{port}", stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE, env=dict(os.environ))
    base = f"http://127.0.0.1:{port}"
    try:
        async with aiohttp.ClientSession() as http:
            async def healthy() -> None:
                try:
                    async with http.get(base + "/health") as resp:
                        assert resp.status == 200
                except aiohttp.ClientConnectionError as exc:
                    raise AssertionError("not listening yet") from exc

            await assert_eventually(healthy, timeout_s=30, interval_s=0.1)
            async with http.get(base + "/api/catalog") as resp:
                assert resp.status == 401
            async with http.post(base + "/api/sessions",
                                 json={"user": "ada", "password": "a-long-password"}) as resp:
                assert resp.status == 201
                token = (await resp.json())["token"]
            for bearer in (token, key):
                async with http.get(base + "/api/catalog",
                                    headers={"Authorization": f"Bearer {bearer}"}) as resp:
                    assert resp.status == 200
    finally:
        server.send_signal(signal.SIGTERM)
        _, err_bytes = await asyncio.wait_for(server.communicate(), 30)
    assert "HTTP API at" in err_bytes.decode()

    assert (await cli("user", "rm", "ada", *url))[0] == 0
    code, listed, _ = await cli("apikey", "list", "--json", *url)
    assert code == 0 and jsonutil.loads(listed) == []  # the user's keys went with the user
    assert (await cli("user", "rm", "ada", *url))[0] == 2


async def test_server_http_rejects_a_malformed_address() -> None:
    code, _, err = await cli("server", "--nats-url", "nats://127.0.0.1:1", "--http", "nonsense")
    assert code == 2 and "HOST:PORT" in err


async def test_a_removed_users_session_stays_dead_when_the_name_is_added_again(
        nats_server: NatsServer) -> None:
    url = ["--nats-url", nats_server.url]
    assert (await cli("init", *url))[0] == 0
    assert (await cli("user", "add", "ada", "--role", "admin", "--password-stdin", *url,
                      stdin=b"a-long-password\n"))[0] == 0
    port = free_port()
    server = await asyncio.create_subprocess_exec(
        CLI, "server", *url, "--http", f"127.0.0.1:{port}", stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL, env=dict(os.environ))
    base = f"http://127.0.0.1:{port}"
    try:
        async with aiohttp.ClientSession() as http:
            async def status_of(token: str) -> int:
                # Another user's sessions: admins only.
                async with http.get(base + "/api/sessions", params={"user": "someone"},
                                    headers={"Authorization": f"Bearer {token}"}) as resp:
                    return resp.status

            async def login(password: str) -> str:
                async with http.post(base + "/api/sessions",
                                     json={"user": "ada", "password": password}) as resp:
                    assert resp.status == 201
                    token: str = (await resp.json())["token"]
                    return token

            async def listening() -> None:
                try:
                    async with http.get(base + "/health") as resp:
                        assert resp.status == 200
                except aiohttp.ClientConnectionError as exc:
                    raise AssertionError("not listening yet") from exc

            await assert_eventually(listening, timeout_s=30, interval_s=0.1)
            admin_token = await login("a-long-password")
            assert await status_of(admin_token) == 200

            assert (await cli("user", "rm", "ada", *url))[0] == 0
            assert (await cli("user", "add", "ada", "--role", "viewer", "--password-stdin", *url,
                              stdin=b"another-long-password\n"))[0] == 0
            assert await status_of(admin_token) == 401
            viewer_token = await login("another-long-password")
            assert await status_of(viewer_token) == 403
            assert await status_of(admin_token) == 401
    finally:
        server.send_signal(signal.SIGTERM)
        await asyncio.wait_for(server.wait(), 30)
