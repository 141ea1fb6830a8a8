"""tools/nats_patience.py: a request NATS cannot answer for a while (here: nobody subscribes
yet, as while a cluster elects a new leader) is made again until it is answered, and given up
with NATS's own error once its bound has passed."""

from __future__ import annotations

import asyncio
import time

import pytest
from nats.aio.msg import Msg
from nats.errors import NoRespondersError

from noetl_stream.bus.connection import Bus
from noetl_stream.tools.nats_patience import patiently

pytestmark = pytest.mark.integration


async def test_a_request_without_a_responder_is_made_again_until_one_answers(bus: Bus) -> None:
    calls = 0

    async def ask() -> bytes:
        nonlocal calls
        calls += 1
        return (await bus.nc.request("patience.echo", b"ping", timeout=0.5)).data

    async def pong(msg: Msg) -> None:
        await msg.respond(b"pong")

    async def answer_later() -> None:
        await asyncio.sleep(0.6)
        await bus.nc.subscribe("patience.echo", cb=pong)

    later = asyncio.create_task(answer_later())
    assert await patiently(ask, what="asking", bound_s=10) == b"pong"
    await later
    assert calls >= 2  # the first found no responder


async def test_past_its_bound_the_last_error_is_raised(bus: Bus) -> None:
    started = time.monotonic()
    with pytest.raises(NoRespondersError):
        await patiently(lambda: bus.nc.request("patience.nobody", b"", timeout=0.5),
                        what="asking", bound_s=1.0)
    assert time.monotonic() - started < 5
