"""Request-reply from a plain NATS client: `noetl.rpc.execute` answers with the server's verdict
(not JetStream's publish ack), and an execution id re-sent with another payload is a conflict,
on the rpc subject and on the request stream alike."""

from __future__ import annotations

import json
from typing import Any

import nats
import pytest

from noetl_stream.bus.connection import Bus
from noetl_stream.bus.nats_server import NatsServer
from noetl_stream.router.state import ExecutionState
from noetl_stream.state.results import ResultStore
from noetl_stream.state.step_results import StepResults
from noetl_stream.testing.waiting import assert_eventually
from playbook_files import read_playbook

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("services")]

HELLO = read_playbook("integration", "request_rpc_hello.yaml")


async def ask(nc: Any, subject: str, body: Any) -> dict[str, Any]:
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    reply = await nc.request(subject, raw, timeout=10)
    answer: dict[str, Any] = json.loads(reply.data)
    return answer


async def test_rpc_execute_answers_with_the_servers_verdict(nats_server: NatsServer,
                                                             bus: Bus) -> None:
    nc = await nats.connect(nats_server.url)
    try:
        first = await ask(nc, "noetl.rpc.execute", {"execution_id": "rpc1", "playbook": HELLO,
                                                    "payload": {"name": "NATS"}})
        assert first == {"accepted": True, "execution_id": "rpc1", "errors": [], "conflict": False}
        again = await ask(nc, "noetl.rpc.execute", {"execution_id": "rpc1", "playbook": HELLO,
                                                    "payload": {"name": "NATS"}})
        assert again["accepted"] is True and again["conflict"] is False
        other = await ask(nc, "noetl.rpc.execute", {"execution_id": "rpc1", "playbook": HELLO,
                                                    "payload": {"name": "someone else"}})
        assert other["accepted"] is False and other["conflict"] is True
        assert "exists, started by another request" in other["errors"][0]

        made = await ask(nc, "noetl.rpc.execute", {"playbook": HELLO})
        assert made["accepted"] is True and made["execution_id"].isdigit()
        broken = await ask(nc, "noetl.rpc.execute", {"playbook": HELLO.replace("python", "pythn")})
        assert broken["accepted"] is False and "pythn" in broken["errors"][0]
        garbage = await ask(nc, "noetl.rpc.execute", b"not json")
        assert garbage["accepted"] is False and "not JSON" in garbage["errors"][0]
    finally:
        await nc.close()

    async def completed() -> ExecutionState:
        state = ExecutionState.from_dict(json.loads((await executions.get("rpc1")).value or b"{}"))
        assert state.status == "completed"
        return state

    executions = await bus.js.key_value("noetl_executions")
    state = await assert_eventually(completed, timeout_s=20)
    # The committed state names its result by key; read it from beside the state.
    await StepResults(bus.js, ResultStore(bus.js)).load(state, steps=False)
    assert state.result == "hi NATS"  # the first payload, not the conflicting one


async def test_a_conflicting_request_on_the_stream_is_answered_on_reply_to(
        nats_server: NatsServer) -> None:
    nc = await nats.connect(nats_server.url)
    try:
        inbox = nc.new_inbox()
        replies = await nc.subscribe(inbox)
        js = nc.jetstream()
        answers = []
        for name in ("first", "first", "second"):  # no msg id: each one reaches the server
            body = {"execution_id": "dup1", "playbook": HELLO, "payload": {"name": name},
                    "reply_to": inbox}
            await js.publish("noetl.requests.execute", json.dumps(body).encode())
            answers.append(json.loads((await replies.next_msg(timeout=10)).data))
    finally:
        await nc.close()
    assert [(a["accepted"], a["conflict"]) for a in answers] == [(True, False), (True, False),
                                                                 (False, True)]


WAITS = read_playbook("integration", "request_rpc_waits.yaml")


async def test_rpc_cancel_answers_with_the_servers_verdict(nats_server: NatsServer) -> None:
    nc = await nats.connect(nats_server.url)
    try:
        started = await ask(nc, "noetl.rpc.execute", {"execution_id": "rpc2", "playbook": WAITS})
        assert started["accepted"] is True
        cancelled = await ask(nc, "noetl.rpc.cancel", {"execution_id": "rpc2", "reason": "test"})
        assert cancelled == {"accepted": True, "execution_id": "rpc2", "errors": [],
                             "conflict": False}
        unknown = await ask(nc, "noetl.rpc.cancel", {"execution_id": "nosuch"})
        assert unknown["accepted"] is False and "no execution nosuch" in unknown["errors"][0]
    finally:
        await nc.close()
