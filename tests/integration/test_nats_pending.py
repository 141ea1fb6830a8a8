"""bus/nats_pending.py relies on private members of nats-py's Client, and bus/wire.py on copies
of its header and subject rules: these tests fail, naming the installed nats-py, when an
upgrade changes any of them."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from nats.aio import client as nats_client
from nats.aio.client import Client

from noetl_stream.bus import nats_pending, wire
from noetl_stream.bus.connection import Bus

pytestmark = pytest.mark.integration


def test_the_installed_nats_py_has_the_pending_buffer_as_relied_on(bus: Bus) -> None:
    assert nats_pending.changes(bus.nc) == []
    assert nats_pending.usable(bus.nc)


def test_wires_rules_are_the_installed_nats_pys() -> None:
    version = f"nats-py {nats_pending.NATS_PY_VERSION}"
    assert wire._HEADER_KEY.pattern == nats_client._HEADER_KEY_RE.pattern, \
        f"{version} checks header keys otherwise: bus/wire.py _HEADER_KEY must follow"
    assert wire._NEWLINES == nats_client._HEADER_VALUE_NEWLINES, \
        f"{version} rewrites header values otherwise: bus/wire.py _NEWLINES must follow"
    assert wire._BLANK.pattern == nats_client._SUBJECT_INVALID_RE.pattern, \
        f"{version} refuses other subjects: bus/wire.py _BLANK must follow"


def test_a_changed_member_is_named_with_the_nats_py_version(bus: Bus) -> None:
    class Changed(Client):
        async def _send_command(self, cmd: bytes, headers: Any, priority: bool = False) -> None:
            raise AssertionError("never called")

        _flush_pending = None  # type: ignore[assignment]

    changed = Changed()
    changed._flush_queue = None  # as before connecting: no queue yet
    found = nats_pending.changes(changed)
    version = f"nats-py {nats_pending.NATS_PY_VERSION}"
    assert found == [
        f"{version}: Client._send_command takes (cmd, headers) where (cmd) was expected",
        f"{version}: Client._flush_pending is no longer a coroutine method",
        f"{version}: a connected Client's _flush_queue is None, not a queue"]
    assert not nats_pending.usable(Changed.__new__(Changed))  # no _flush_queue at all


async def test_a_command_sent_through_the_pending_buffer_arrives(bus: Bus) -> None:
    got: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()

    async def take(msg: Any) -> None:
        if not got.done():
            got.set_result(msg.data)

    sub = await bus.nc.subscribe("pending.x", cb=take)
    try:
        await nats_pending.send_command(bus.nc, b"PUB pending.x 5\r\nhello\r\n")
        assert await asyncio.wait_for(got, 10) == b"hello"
    finally:
        await sub.unsubscribe()
