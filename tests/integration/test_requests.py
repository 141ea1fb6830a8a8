"""The request and event subjects, driven by a plain NATS client with the documented JSON bodies."""

from __future__ import annotations

import asyncio

import pytest
from plain_client import PlainClient

from noetl_stream.bus.connection import Bus
from playbook_files import read_playbook

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("services")]

TWO_STEPS = read_playbook("integration", "requests_two_steps.yaml")

BROKEN = read_playbook("integration", "requests_broken.yaml")


async def test_plain_client_request_runs_to_completion(client: PlainClient) -> None:
    feed = await client.run("plain1", TWO_STEPS, payload={"base": 1})

    types = feed.types()
    assert types[0] == "execution.started"
    assert types[-1] == "execution.completed"
    assert [e["step"] for e in feed.of("step.done")] == ["start", "finish"]
    final = feed.final
    assert final["status"] == "completed"
    assert final["result"] == {"n": 3}
    assert final["steps"]["start"] == {"status": "completed", "runs": 1, "result": {"n": 2}}


async def test_request_with_reply_to_is_answered_accepted(client: PlainClient) -> None:
    inbox, replies = await client.reply_inbox()

    await client.run("replied1", TWO_STEPS, reply_to=inbox)

    reply = await asyncio.wait_for(replies.get(), 10)
    assert reply == {"accepted": True, "execution_id": "replied1", "errors": [],
                     "conflict": False}


async def test_malformed_requests_are_rejected_and_the_server_keeps_serving(
        client: PlainClient) -> None:
    inbox, replies = await client.reply_inbox()

    await client.publish_request(b"this is not json {")

    missing = await client.follow("nobook")
    await client.publish_request({"execution_id": "nobook", "reply_to": inbox})
    reply = await asyncio.wait_for(replies.get(), 10)
    assert reply["accepted"] is False
    assert reply["execution_id"] == "nobook"
    assert any("playbook" in e for e in reply["errors"])
    await asyncio.wait_for(missing.ended.wait(), 10)
    assert missing.types() == ["execution.rejected"]

    invalid = await client.follow("broken1")
    await client.publish_request({"execution_id": "broken1", "playbook": BROKEN,
                                  "playbook_file": "broken.yaml", "reply_to": inbox})
    reply = await asyncio.wait_for(replies.get(), 10)
    assert reply["accepted"] is False
    assert reply["execution_id"] == "broken1"
    assert any(e.startswith("broken.yaml:8:") and "pythn" in e for e in reply["errors"]), reply
    await asyncio.wait_for(invalid.ended.wait(), 10)
    assert invalid.types() == ["execution.rejected"]
    assert invalid.final["errors"] == reply["errors"]

    feed = await client.run("after1", TWO_STEPS)
    assert feed.final["status"] == "completed"


async def test_garbage_on_an_event_subject_does_not_stop_the_server(
        client: PlainClient, bus: Bus) -> None:
    await bus.js.publish("noetl.events.ghost.step.done.default", b"\x00\xff not an event")
    await bus.js.publish("noetl.events.ghost.step.failed.default", b"[1, 2, 3]")
    await bus.js.publish("noetl.events.ghost.step.done.default", b'{"step_run_id": "ghost.start.1"}')

    feed = await client.run("afterpoison", TWO_STEPS)

    assert feed.final["status"] == "completed"
    assert feed.final["result"] == {"n": 42}
