"""The remote CLI's event stream survives a dropped connection: a TCP relay in front of the real
HTTP API cuts the first stream right after its first frame, and the client reconnects with
Last-Event-ID, so every event arrives once and in order."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import pytest
from api_client import admin_key, running_api

from noetl_stream.bus.connection import Bus
from noetl_stream.cli.remote import open_client
from noetl_stream.services import run_services
from playbook_files import read_playbook

pytestmark = pytest.mark.integration

HELLO = read_playbook("integration", "cli_remote_resume_hello.yaml")


@dataclass
class CuttingRelay:
    """Forwards TCP to `upstream`; the first event stream it carries is cut after one frame."""

    upstream: tuple[str, int]
    stream_requests: list[bytes] = field(default_factory=list)
    url: str = ""

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                    cut_after_frame: bool) -> None:
        seen = b""
        with contextlib.suppress(ConnectionError):
            while data := await reader.read(65536):
                if cut_after_frame:
                    seen += data
                    end = seen.find(b"\n\n")  # HTTP framing is CRLF: this ends an SSE frame
                    if end >= 0:
                        writer.write(data[:len(data) - (len(seen) - end - 2)])
                        await writer.drain()
                        break
                writer.write(data)
                await writer.drain()
        writer.close()

    async def _serve(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        up_r, up_w = await asyncio.open_connection(*self.upstream)
        head = await client_r.readuntil(b"\r\n\r\n")
        is_stream = b"/events/stream" in head.split(b"\r\n", 1)[0]
        if is_stream:
            self.stream_requests.append(head)
        up_w.write(head)
        cut = is_stream and len(self.stream_requests) == 1
        await asyncio.gather(self._pipe(client_r, up_w, False), self._pipe(up_r, client_w, cut))

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[str]:
        server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        try:
            yield f"http://127.0.0.1:{port}"
        finally:
            server.close()
            with contextlib.suppress(Exception):
                await server.wait_closed()


async def test_remote_events_resume_after_a_dropped_connection_with_last_event_id(bus: Bus) -> None:
    async with run_services(bus, python_children=1), running_api(bus) as api:
        key = await admin_key(api)
        host, _, port = api.url.removeprefix("http://").rpartition(":")
        relay = CuttingRelay((host, int(port)))
        # Started directly: the relay reads only a connection's first request, which must be
        # the stream's.
        status, started = await api.call("POST", "/api/executions", json={"playbook": HELLO},
                                         token=key)
        assert status == 202, started
        execution_id = started["execution_id"]
        async with relay.running() as url, open_client(url, key) as client:
            frames = [frame async for frame in client.events(execution_id)]
        _, page = await api.call("GET", f"/api/executions/{execution_id}/events", token=key)

    assert len(relay.stream_requests) == 2
    assert b"last-event-id" not in relay.stream_requests[0].lower()
    assert f"Last-Event-ID: {frames[0].id}".encode() in relay.stream_requests[1]
    assert [f.id for f in frames] == [str(item["seq"]) for item in page["items"]]
    assert frames[0].event == "execution.started"
    assert frames[-1].event == "execution.completed"
    assert frames[-1].json()["status"] == "completed"
