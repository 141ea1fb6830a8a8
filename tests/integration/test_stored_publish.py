"""The publisher that waits for the store's ack (bus/stored_publish.py), on a real
nats-server: sequences, duplicates, revision-checked KV writes, and nats-py's own errors for a
subject no stream stores, a refused write and an ack that never comes."""

from __future__ import annotations

import asyncio

import pytest
from nats.errors import TimeoutError as NatsTimeoutError
from nats.js import errors as js_errors
from nats.js.api import KeyValueConfig, StorageType, StreamConfig

from noetl_stream.bus.connection import Bus
from noetl_stream.bus.stored_publish import StoredPublisher

pytestmark = pytest.mark.integration


async def test_sequences_duplicates_and_concurrent_publishes(bus: Bus) -> None:
    await bus.js.add_stream(StreamConfig(name="SPUB", subjects=["spub.>"],
                                         storage=StorageType.MEMORY, duplicate_window=60))
    first = await bus.stored.publish("spub.a", b"1", {"Nats-Msg-Id": "one"})
    again = await bus.stored.publish("spub.a", b"2", {"Nats-Msg-Id": "one"})
    assert again == first
    many = await asyncio.gather(*(bus.stored.publish("spub.b", str(i).encode())
                                  for i in range(50)))
    assert sorted(many) == list(range(first + 1, first + 51))
    # Each publish got the sequence of its own message.
    assert [(await bus.js.get_msg("SPUB", seq)).data for seq in many] == \
        [str(i).encode() for i in range(50)]


async def test_kv_update_checks_the_revision(bus: Bus) -> None:
    kv = await bus.js.create_key_value(KeyValueConfig(bucket="spub_kv", history=1))
    revision = await kv.put("k", b"a")
    newer = await bus.stored.update("spub_kv", "k", b"b", revision)
    assert newer > revision
    assert (await kv.get("k")).value == b"b"
    with pytest.raises(js_errors.KeyWrongLastSequenceError):
        await bus.stored.update("spub_kv", "k", b"c", revision)
    assert (await kv.get("k")).value == b"b"


async def test_errors_are_nats_pys_own(bus: Bus) -> None:
    with pytest.raises(js_errors.NoStreamResponseError):
        await bus.stored.publish("nobody.stores.this", b"x")
    await bus.js.add_stream(StreamConfig(name="SPUB2", subjects=["spub2.>"],
                                         storage=StorageType.MEMORY, max_msg_size=8))
    with pytest.raises(js_errors.APIError):
        await bus.stored.publish("spub2.big", b"more than eight bytes")
    # A responder that never answers: the wait ends at the publisher's timeout.
    silent = await bus.nc.subscribe("spub.silent")
    quick = StoredPublisher(bus.nc, timeout_s=0.3)
    with pytest.raises(NatsTimeoutError):
        await quick.publish("spub.silent", b"x")
    await silent.unsubscribe()


async def test_each_wait_ends_at_its_own_timeout_under_one_timer(bus: Bus) -> None:
    """Waits share one timer: each unanswered one still fails at its own timeout (never
    before), an answered one between them is not failed, and a wait given up by its caller
    leaves nothing behind."""
    await bus.js.add_stream(StreamConfig(name="SPUB3", subjects=["spub3.>"],
                                         storage=StorageType.MEMORY))
    silent = await bus.nc.subscribe("spub.quiet")
    quick = StoredPublisher(bus.nc, timeout_s=0.4)
    loop = asyncio.get_running_loop()
    began = loop.time()
    first = asyncio.create_task(quick.publish("spub.quiet", b"1"))
    await asyncio.sleep(0.2)
    assert await quick.publish("spub3.a", b"answered") == 1
    second = asyncio.create_task(quick.publish("spub.quiet", b"2"))
    given_up = asyncio.create_task(quick.publish("spub.quiet", b"3"))
    await asyncio.sleep(0.05)
    given_up.cancel()
    with pytest.raises(NatsTimeoutError):
        await first
    first_ended = loop.time() - began
    with pytest.raises(NatsTimeoutError):
        await second
    second_ended = loop.time() - began
    assert 0.399 <= first_ended < second_ended
    assert 0.599 <= second_ended < 5
    with pytest.raises(asyncio.CancelledError):
        await given_up
    assert not quick._waiting and not quick._deadlines and quick._timer is None
    # Still publishing after the timer ran out of waits.
    assert await quick.publish("spub3.a", b"again") == 2
    await silent.unsubscribe()
