"""A worker of one pool, with its own NATS user, against another pool's execution.

deploy/nats/accounts/accounts.conf as shipped, with a second pool's worker user (`worker-secure`)
made from `worker-default` as its README says, on a real nats-server. An execution of pool
`secure` waits for its command while `worker-default` (pool `default`) tries to take, answer,
redirect, delete or overhear it; every attempt is refused by nats-server (no reply, and a
permissions violation reported to the attacker), the stored command and state are untouched, and
the real `secure` worker then completes the execution with its own result.

Nor can it cancel the other pool's execution or start one of its own choosing there: the
clients' request subjects are closed to it, and the server takes a worker's requests on its own
pool's subjects only for children of that pool's steps (server/child_requests.py).

What a worker of another pool can still do is listed in docs/security.md, "Known gaps".
"""

from __future__ import annotations

import asyncio
import logging

import pytest
from nats.aio.msg import Msg
from nats.errors import TimeoutError as NatsTimeoutError
from nats.js.errors import NotFoundError
from test_nats_accounts import (  # noqa: F401  (fixtures)
    DENIED_WAIT_S,
    SECURE,
    Accounts,
    _reported,
    _violations,
    accounts,
    client_bus,
    finish_on_secure,
    server_bus,
    worker_bus,
)

from noetl_stream import jsonutil
from noetl_stream.bus.connection import Bus
from noetl_stream.bus.provision import provision
from noetl_stream.messages import CancelRequest, ExecutionRequest
from noetl_stream.services import run_services, submit_and_watch
from noetl_stream.testing.waiting import assert_eventually

pytestmark = pytest.mark.integration

# JetStream API requests a worker of pool `default` may not make against pool `secure` (or at
# all): each is answered by nobody, and nats-server reports the violation.
REFUSED_REQUESTS = (
    # take or settle the other pool's commands
    "$JS.API.CONSUMER.MSG.NEXT.NOETL_COMMANDS.noetl-workers-secure",
    "$JS.API.CONSUMER.CREATE.NOETL_COMMANDS.steal.noetl.commands.secure.>",
    "$JS.API.CONSUMER.CREATE.NOETL_COMMANDS",
    "$JS.API.CONSUMER.DURABLE.CREATE.NOETL_COMMANDS.steal",
    "$JS.API.CONSUMER.DELETE.NOETL_COMMANDS.noetl-workers-secure",
    # the router's copies of outcomes, and its durables
    "$JS.API.CONSUMER.CREATE.NOETL_ROUTER.steal.noetl.router.>",
    # delete or empty streams and buckets
    "$JS.API.STREAM.DELETE.NOETL_COMMANDS",
    "$JS.API.STREAM.PURGE.NOETL_COMMANDS",
    "$JS.API.STREAM.PURGE.NOETL_EVENTS",
    "$JS.API.STREAM.PURGE.KV_noetl_executions",
    "$JS.API.STREAM.DELETE.KV_noetl_credentials",
    "$JS.API.STREAM.UPDATE.NOETL_COMMANDS",
    "$JS.API.STREAM.MSG.DELETE.NOETL_COMMANDS",
    # list the keys of the execution states (execution ids of every pool)
    "$JS.API.STREAM.INFO.KV_noetl_step_results",
)


async def _command_of_secure(bus: Bus) -> dict[str, object]:
    try:
        msg = await bus.js.get_last_msg("NOETL_COMMANDS", "noetl.commands.secure.python")
    except NotFoundError as exc:
        raise AssertionError("no command for pool secure yet") from exc
    body: dict[str, object] = jsonutil.loads(msg.data)
    return body


async def test_a_worker_of_one_pool_can_neither_take_redirect_nor_delete_anothers_work(
        accounts: Accounts, server_bus: Bus, worker_bus: Bus, client_bus: Bus,  # noqa: F811
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="noetl_stream.connection")
    await provision(server_bus, pools=("default", "secure"))
    async with run_services(server_bus, worker=False):
        waiting = asyncio.create_task(submit_and_watch(
            client_bus, playbook_text=SECURE, playbook_file="secure_pool.yaml", payload={},
            on_event=lambda _: None, timeout_s=120))
        command = await assert_eventually(lambda: _command_of_secure(server_bus), timeout_s=30)
        eid = str(command["execution_id"])
        state_before = (await server_bus.js.get_msg(
            "KV_noetl_executions", subject=f"$KV.noetl_executions.{eid}")).data

        for subject in REFUSED_REQUESTS:
            with pytest.raises(NatsTimeoutError):
                await worker_bus.nc.request(subject, b"{}", timeout=DENIED_WAIT_S)

        # Publishes into the other pool's places: a command, its dead letters, its heartbeat,
        # an execution's state, a KV delete of it, a stored router copy.
        forged = jsonutil.dumps({**command, "tasks": command.get("tasks")})
        refused_publishes = (
            "noetl.commands.secure.python", "noetl.commands.default.python",
            "noetl.dlq.commands.secure.forged", "$KV.noetl_runtime.worker.secure.forged",
            f"$KV.noetl_executions.{eid}", f"noetl.router.0.{eid}.step.done.secure",
            f"noetl.events.{eid}.execution.completed", f"noetl.events.{eid}.step.done.secure")
        for subject in refused_publishes:
            with pytest.raises(NatsTimeoutError):
                await worker_bus.js.publish(subject, forged, timeout=DENIED_WAIT_S)

        # Overhearing: every subject but its own inbox and the two withdrawal events.
        heard: list[bytes] = []

        async def overhear(msg: Msg) -> None:
            heard.append(msg.data)

        wide = (">", "$JS.API.>", "noetl.>", "noetl.commands.>", "noetl.events.>",
                "$KV.>", "_INBOX.>", "_INBOX.worker-secure.>")
        for pattern in wide:
            await worker_bus.nc.subscribe(pattern, cb=overhear)
        await worker_bus.nc.flush()
        # A command published meanwhile (a signal by the client here) reaches none of them.
        await client_bus.js.publish(f"noetl.events.{eid}.signal.probe", b"{}")

        for subject in REFUSED_REQUESTS + refused_publishes:
            await assert_eventually(lambda s=subject: _reported(_violations(caplog, s)))
        for pattern in wide:
            await assert_eventually(lambda p=pattern: _reported([
                r for r in caplog.records if "permissions violation for subscription" in
                r.getMessage().lower() and f'"{p.lower()}"' in r.getMessage().lower()]))
        assert heard == []

        # Nothing changed: the command still waits for pool secure, the state is as it was.
        assert await _command_of_secure(server_bus) == command
        assert (await server_bus.js.get_msg(
            "KV_noetl_executions", subject=f"$KV.noetl_executions.{eid}")).data == state_before
        assert not waiting.done()

        final = await finish_on_secure(accounts, waiting, 90)
    assert final["event_type"] == "execution.completed", final
    assert final["result"] == {"from": "secure"}


async def test_a_worker_of_one_pool_can_neither_cancel_nor_start_another_pools_executions(
        accounts: Accounts, server_bus: Bus, worker_bus: Bus, client_bus: Bus,  # noqa: F811
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="noetl_stream.connection")
    caplog.set_level(logging.WARNING, logger="noetl_stream.server")
    await provision(server_bus, pools=("default", "secure"))
    async with run_services(server_bus, worker=False):
        waiting = asyncio.create_task(submit_and_watch(
            client_bus, playbook_text=SECURE, playbook_file="secure_pool.yaml", payload={},
            on_event=lambda _: None, timeout_s=120))
        command = await assert_eventually(lambda: _command_of_secure(server_bus), timeout_s=30)
        eid, run = str(command["execution_id"]), str(command["step_run_id"])

        # The clients' subjects and the other pool's: NATS refuses them.
        cancel = CancelRequest(execution_id=eid, reason="forged").model_dump_json().encode()
        for subject in ("noetl.requests.cancel", "noetl.requests.cancel.secure",
                        "noetl.requests.execute", "noetl.requests.execute.secure"):
            with pytest.raises(NatsTimeoutError):
                await worker_bus.js.publish(subject, cancel, timeout=DENIED_WAIT_S)
            await assert_eventually(lambda s=subject: _reported(_violations(caplog, s)))
        # Its own pool's subjects: stored, and refused by the server. A cancel of an execution
        # that is no child of its commands, a start with no parent step run, and one that names
        # the other pool's step run as its parent.
        await worker_bus.js.publish("noetl.requests.cancel.default", cancel,
                                    headers={"Nats-Msg-Id": f"forged-cancel:{eid}"})
        # A request refused under the id of the running execution: its rejection must not
        # reach that execution's log, where it would end whoever follows it.
        await worker_bus.js.publish("noetl.requests.execute.default", jsonutil.dumps(
            {"execution_id": eid, "playbook": SECURE, "reply_to": None}),
            headers={"Nats-Msg-Id": f"req:{eid}:forged"})
        forged = [ExecutionRequest(execution_id=f"{eid}1", playbook=SECURE),
                  ExecutionRequest(execution_id=f"{eid}2", playbook=SECURE,
                                   parent_execution_id=eid, parent_step_run_id=run)]
        for request in forged:
            await worker_bus.js.publish("noetl.requests.execute.default",
                                        request.model_dump_json().encode(),
                                        headers={"Nats-Msg-Id": f"req:{request.execution_id}"})
        await assert_eventually(lambda: _reported([
            r for r in caplog.records if "refused cancel request" in r.getMessage()]))
        for request, why in zip(forged, ("names no parent step run", "runs on pool 'secure'"),
                                strict=True):
            await assert_eventually(lambda w=why: _reported([
                m for m in caplog.records if "rejected execution request" in m.getMessage()
                and w in m.getMessage()]))
            with pytest.raises(NotFoundError):
                await server_bus.js.get_msg("KV_noetl_executions",
                                            subject=f"$KV.noetl_executions.{request.execution_id}")
        await asyncio.sleep(1)
        assert not waiting.done()

        final = await finish_on_secure(accounts, waiting, 90)
    assert final["event_type"] == "execution.completed", final
    assert final["result"] == {"from": "secure"}
    with pytest.raises(NotFoundError):
        await server_bus.js.get_last_msg("NOETL_EVENTS", f"noetl.events.{eid}.execution.rejected")
