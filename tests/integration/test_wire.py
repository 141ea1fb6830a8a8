"""Messages with headers written by bus/wire.py arrive as nats-py's own publish sends them, on a
real nats-server: subject, reply, payload and every header, values trimmed and CR/LF replaced,
an empty key left out; and the same refusals, with nats-py's exceptions."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

import nats
import pytest
from nats import errors
from nats.aio.msg import Msg
from nats.js.api import Header

from noetl_stream.bus import wire
from noetl_stream.bus.connection import Bus

pytestmark = pytest.mark.integration

HEADERS: list[dict[str, str]] = [
    {"Nats-Msg-Id": "evt:e1:task.started:s1-abc:-", "Noetl-Copy": "publish:0123456789abcdef"},
    {"Nats-Expected-Last-Subject-Sequence": "42"},
    {Header.EXPECTED_LAST_SUBJECT_SEQUENCE: "42"},  # nats-py's str enum, written as its value
    {" Padded ": "  value with spaces  ", "Split": "one\r\ntwo\nthree\rfour", "": "dropped"},
    {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "X": ""},
]


async def received(bus: Bus, subject: str, send: object) -> Msg:
    got: asyncio.Future[Msg] = asyncio.get_running_loop().create_future()

    async def take(msg: Msg) -> None:
        if not got.done():
            got.set_result(msg)

    sub = await bus.nc.subscribe(subject, cb=take)
    try:
        assert asyncio.iscoroutine(send)
        await send
        return await asyncio.wait_for(got, 10)
    finally:
        await sub.unsubscribe()


@pytest.mark.parametrize("headers", HEADERS)
async def test_a_message_arrives_as_nats_py_sends_it(bus: Bus, headers: Mapping[str, str]) -> None:
    payload = b'{"event_type": "task.started"}'
    ours = await received(bus, "wire.ours", wire.publish(
        bus.nc, "wire.ours", payload, reply="_INBOX.wire.1", headers=headers))
    theirs = await received(bus, "wire.theirs", bus.nc.publish(
        "wire.theirs", payload, reply="_INBOX.wire.1", headers=dict(headers)))
    assert (ours.data, ours.reply, ours.headers) == (theirs.data, theirs.reply, theirs.headers)
    assert ours.headers  # the comparison is of something
    if "Split" in headers:
        assert ours.headers["Split"] == "one  two three four"
        assert ours.headers["Padded"] == "value with spaces"


def test_the_header_block() -> None:
    assert wire.header_block({"Nats-Msg-Id": "a1", "K": " v\n "}) == \
        b"NATS/1.0\r\nNats-Msg-Id: a1\r\nK: v\r\n\r\n"
    for _ in range(2):  # the key seen before as text, then as nats-py's enum
        assert wire.header_block({Header.EXPECTED_LAST_SUBJECT_SEQUENCE: "7"}) == \
            b"NATS/1.0\r\nNats-Expected-Last-Subject-Sequence: 7\r\n\r\n"


async def test_refusals_are_nats_pys(bus: Bus) -> None:
    with pytest.raises(errors.BadHeaderError):
        await wire.publish(bus.nc, "wire.x", b"", headers={"Bad Key": "v"})
    with pytest.raises(errors.BadHeaderError):
        await wire.publish(bus.nc, "wire.x", b"", headers={"Colon:": "v"})
    for subject, reply in (("wire x", ""), ("wire.x\r\nPUB y 0", ""), ("", ""),
                           ("wire.x", "in box")):
        with pytest.raises(errors.BadSubjectError):
            await wire.publish(bus.nc, subject, b"", reply=reply, headers={"K": "v"})
    with pytest.raises(errors.MaxPayloadError):
        await wire.publish(bus.nc, "wire.x", b"x" * (bus.nc.max_payload + 1), headers={"K": "v"})


async def test_a_closed_connection_refuses_as_nats_py_does(bus: Bus) -> None:
    nc = await nats.connect(bus.nc.connected_url.geturl())
    await nc.close()
    with pytest.raises(errors.ConnectionClosedError):
        await wire.publish(nc, "wire.x", b"", headers={"K": "v"})
