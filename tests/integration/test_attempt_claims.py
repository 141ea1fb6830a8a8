"""A worker runs one copy of a command per attempt (worker/attempt_claims.py): the attempt's
stored `task.started` names the copy that took it; a copy stored again after the duplicate window
is acknowledged without running, while a delivery of the message that took the attempt runs,
unless that message's run already stored its outcome. Claims an earlier release wrote to KV are
honoured the same way. The command is one a server wrote
(tests/fixtures/inflight-schema-2.json), run by a real worker on a real nats-server whose window
is one second."""

from __future__ import annotations

import asyncio
import base64
import json
import logging
from pathlib import Path
from typing import Any

import pytest

from noetl_stream import ids, jsonutil
from noetl_stream.bus.connection import Bus
from noetl_stream.bus.provision import provision
from noetl_stream.bus.publish import (
    COPY_HEADER,
    FIRST_PUBLISH,
    PUBLISH_ID_HEADER,
    PUBLISH_ROUND_HEADER,
)
from noetl_stream.formats import CLAIM
from noetl_stream.router.state import ExecutionState
from noetl_stream.server.outbox_marks import OutboxMarks
from noetl_stream.services import run_services
from noetl_stream.testing.events import stored_events
from noetl_stream.testing.waiting import assert_eventually
from noetl_stream.worker.attempt_claims import claim_key
from noetl_stream.worker.start_scan import Scan, starts_of

WRITTEN = json.loads((Path(__file__).parents[1] / "fixtures" / "inflight-schema-2.json").read_text())
COMMAND = WRITTEN["commands"][0]
EXECUTION_ID = WRITTEN["execution_id"]
MSG_ID = COMMAND["headers"]["Nats-Msg-Id"]
COMMAND_BODY = json.loads(base64.b64decode(COMMAND["data"]))
START_ID = ids.event_msg_id(EXECUTION_ID, "task.started", COMMAND_BODY["step_run_id"],
                            COMMAND_BODY["iteration"])


async def publish_command(bus: Bus, publish_id: str | None = None, first: bool = False) -> int:
    """The command as its server published it (this release's servers name each publish and
    mark a committer's `first`; the fixture's was written before they did); the stream sequence
    it is stored at."""
    headers = {"Nats-Msg-Id": MSG_ID, **({PUBLISH_ID_HEADER: publish_id} if publish_id else {}),
               **({PUBLISH_ROUND_HEADER: FIRST_PUBLISH} if first else {})}
    ack = await bus.js.publish(COMMAND["subject"], base64.b64decode(COMMAND["data"]),
                               headers=headers)
    assert not ack.duplicate
    return ack.seq


async def runs(bus: Bus) -> list[dict[str, Any]]:
    """The iteration's outcomes in the events stream that a worker stored: one per run (the
    window is past between runs, so a second outcome would be stored too)."""
    return [e for e in await stored_events(bus.js, EXECUTION_ID)
            if e["event_type"] == "loop.iteration.done" and e.get("result") != {"stored": True}]


async def queue_empty(bus: Bus) -> None:
    assert (await bus.js.stream_info("NOETL_COMMANDS")).state.messages == 0


@pytest.mark.parametrize(("first_id", "copy_id", "holder"), [
    ("a1", "b2", "publish:a1"),  # named publishes, as this release's servers make them
    (None, None, "seq:1"),  # an earlier release's: told apart by stream sequence
])
async def test_a_copy_stored_after_the_window_is_not_run_again(
        one_second_window: Bus, first_id: str | None, copy_id: str | None, holder: str) -> None:
    bus = one_second_window
    kv_writes: list[str] = []

    async def tap(msg: Any) -> None:
        kv_writes.append(msg.subject)

    await bus.nc.subscribe("$KV.noetl_step_results.>", cb=tap)
    async with run_services(bus, server=False, pool="later", python_children=1):
        first = await publish_command(bus, first_id, first=first_id is not None)
        await assert_eventually(lambda: queue_empty(bus), timeout_s=20)
        assert len(await runs(bus)) == 1
        await asyncio.sleep(1.5)  # past the window: the same msg id is stored again
        copy = await publish_command(bus, copy_id)  # published again: no first mark
        assert copy != first == 1
        await assert_eventually(lambda: queue_empty(bus), timeout_s=20)
        await asyncio.sleep(1.5)  # a second run would have published its outcome by now
    assert len(await runs(bus)) == 1
    # The attempt's one start is its claim, naming the copy that took it; nothing in KV.
    starts = await starts_of(bus, Scan(EXECUTION_ID, START_ID))
    assert [s.copy for s in starts] == [holder]
    assert kv_writes == []


async def store_outcome(bus: Bus, iteration: int, etype: str = "loop.iteration.done") -> None:
    """An outcome of the command's step run, as its worker publishes it (pool `later`)."""
    body = COMMAND_BODY | {"event_type": etype, "iteration": iteration, "status": "ok",
                           "result": {"stored": True}}
    await bus.js.publish(bus.topology.outcome_subject(EXECUTION_ID, etype, "later"),
                         jsonutil.dumps(body), headers={"Nats-Msg-Id": ids.event_msg_id(
                             EXECUTION_ID, etype, COMMAND_BODY["step_run_id"], iteration)})


@pytest.mark.parametrize(("publish_id", "claimed", "ended", "stored", "ran"), [
    # Its earlier delivery was lost before an outcome: it runs again. Restored from a backup,
    # the message has another stream sequence but the same publish id.
    ("a1", "publish:a1", False, None, 1),
    (None, "seq:1", False, None, 1),
    # The outcome of another iteration of the step run proves nothing about this one.
    ("a1", "publish:a1", False, (1, "loop.iteration.done"), 1),
    # Its outcome is stored, only the ack was lost: not again, whether it succeeded or failed.
    ("a1", "publish:a1", False, (0, "loop.iteration.done"), 0),
    (None, "seq:1", False, (0, "loop.iteration.failed"), 0),
    # ... or an earlier release marked its claim finished.
    ("a1", "publish:a1", True, None, 0),
    (None, "seq:1", True, None, 0),
    # A copy stored again after the window: never.
    ("b2", "publish:a1", False, None, 0),
    (None, "seq:77", False, None, 0),
])
async def test_a_claimed_attempt_runs_only_for_the_message_that_holds_the_claim_unfinished(
        one_second_window: Bus, publish_id: str | None, claimed: str, ended: bool,
        stored: tuple[int, str] | None, ran: int) -> None:
    bus = one_second_window
    # The claim an earlier delivery wrote (its worker died, or its ack was lost).
    await (await bus.js.key_value("noetl_step_results")).create(
        claim_key(EXECUTION_ID, MSG_ID),
        jsonutil.dumps(CLAIM.stamp({"msg_id": MSG_ID, "copy": claimed, "claimed_at": 0.0,
                                    "finished": ended})))
    if stored is not None:
        await store_outcome(bus, *stored)
    assert await publish_command(bus, publish_id) == 1
    async with run_services(bus, server=False, pool="later", python_children=1):
        await assert_eventually(lambda: queue_empty(bus), timeout_s=20)
        await asyncio.sleep(1.0)
    assert len(await runs(bus)) == ran


async def store_start(bus: Bus, copy: str) -> None:
    """The attempt's start as a worker that took it with `copy` stored it."""
    body = COMMAND_BODY | {"event_type": "task.started", "pool": "later"}
    await bus.js.publish(bus.topology.event_subject(EXECUTION_ID, "task.started"),
                         jsonutil.dumps(body), headers={"Nats-Msg-Id": START_ID,
                                                        COPY_HEADER: copy})


STARTED = pytest.mark.parametrize(("started_by", "publish_id", "first", "outcome", "ran"), [
    # An earlier delivery of this message started and was lost before an outcome: it runs
    # again (restored from a backup, the message has another stream sequence, the same id).
    ("publish:a1", "a1", True, False, 1),
    # ... its outcome is stored, only the ack was lost: not again.
    ("publish:a1", "a1", True, True, 0),
    # A copy published again, or a first publish whose attempt another copy took: never.
    ("publish:a1", "b2", False, False, 0),
    ("publish:a1", "b2", True, False, 0),
    ("seq:1", None, False, False, 0),
])


@STARTED
async def test_an_attempt_started_inside_the_window_runs_only_for_its_message_unfinished(
        bus: Bus, caplog: pytest.LogCaptureFixture, started_by: str, publish_id: str | None,
        first: bool, outcome: bool, ran: int) -> None:
    """The default window: the stream calls the worker's start a duplicate, and a first
    publish reads nothing but the start it names."""
    await provision(bus, pools=("later",))
    await run_started(bus, started_by, publish_id, first, outcome, ran, after_window=False)
    assert tools_called(caplog) == ran


@STARTED
async def test_an_attempt_started_past_the_window_runs_only_for_its_message_unfinished(
        one_second_window: Bus, caplog: pytest.LogCaptureFixture, started_by: str,
        publish_id: str | None, first: bool, outcome: bool, ran: int) -> None:
    """A one-second window, past by the time the command comes: the worker reads the starts
    back."""
    await run_started(one_second_window, started_by, publish_id, first, outcome, ran,
                      after_window=True)
    assert tools_called(caplog) == ran


def tools_called(caplog: pytest.LogCaptureFixture) -> int:
    """The command's task calls (observe/task_log.py), whatever became of their outcome: one
    stored again inside the window is dropped as a duplicate of the one already there."""
    return sum(1 for r in caplog.records
               if r.name == "noetl_stream.tasks" and r.getMessage() == "task started")


async def run_started(bus: Bus, started_by: str, publish_id: str | None, first: bool,
                      outcome: bool, ran: int, *, after_window: bool) -> None:
    logging.getLogger("noetl_stream.tasks").setLevel(logging.INFO)
    if started_by == "seq:1":  # the copy that took it was stored at sequence 1, long gone
        await bus.js.publish(COMMAND["subject"], b"{}", headers={"Nats-Msg-Id": "gone"})
        await bus.js.purge_stream("NOETL_COMMANDS")
    await publish_command(bus, publish_id, first)
    # Then the start: of an earlier delivery of this message, or of a copy stored after it
    # (a copy can only follow the first publish).
    await store_start(bus, started_by)
    if outcome:
        await store_outcome(bus, COMMAND_BODY["iteration"])
    if after_window:
        await asyncio.sleep(1.5)
    async with run_services(bus, server=False, pool="later", python_children=1):
        await assert_eventually(lambda: queue_empty(bus), timeout_s=20)
        await asyncio.sleep(1.0)
    if after_window or not outcome:  # inside the window a second outcome would be dropped
        assert len(await runs(bus)) == ran
    # The start found is the attempt's claim: one that looked first stored none of its own. A
    # first publish (which looks only when its start may be past the window, here always)
    # stored its own before it read the earlier one.
    copies = [s.copy for s in await starts_of(bus, Scan(EXECUTION_ID, START_ID))]
    stored_own = first and after_window
    assert copies == [started_by] + ([f"publish:{publish_id}"] if stored_own else [])


async def test_an_outbox_published_again_after_the_window_runs_each_attempt_once(
        one_second_window: Bus) -> None:
    """The server's own publishes: a committer's carries the first publish's mark, the copy a
    state read cold publishes again does not, and its worker finds the attempt started."""
    bus, marks = one_second_window, OutboxMarks(one_second_window)
    state = ExecutionState.from_dict(WRITTEN["state"])
    commands = [m.msg_id for m in state.outbox if m.kind == "command"]
    published: list[tuple[str | None, str | None]] = []

    async def tap(msg: Any) -> None:
        headers = msg.headers or {}
        published.append((headers.get(PUBLISH_ROUND_HEADER), headers.get(PUBLISH_ID_HEADER)))

    await bus.nc.subscribe("noetl.commands.>", cb=tap)
    async with run_services(bus, server=False, pool="later", python_children=1):
        await marks.publish(EXECUTION_ID, 5, state.outbox, None)
        await assert_eventually(lambda: queue_empty(bus), timeout_s=20)
        await asyncio.sleep(1.5)  # past the window
        # Revision 6 committed the same messages and its server died before marking them.
        await marks.republish(EXECUTION_ID, 6, state.outbox, None)
        await assert_eventually(lambda: queue_empty(bus), timeout_s=20)
        await asyncio.sleep(1.5)  # a second run would have published its outcome by now
    assert len(await runs(bus)) == len(commands) == 3
    rounds = [mark for mark, _ in published]
    assert rounds == [FIRST_PUBLISH] * 3 + [None] * 3
    assert len({publish_id for _, publish_id in published}) == 2
    for msg_id in commands:  # `cmd:<step run>:<iteration>:<attempt>`
        _, run, iteration, _ = msg_id.split(":")
        start_id = ids.event_msg_id(EXECUTION_ID, "task.started", run, int(iteration))
        [start] = await starts_of(bus, Scan(EXECUTION_ID, start_id))
        assert start.copy == f"publish:{published[0][1]}"
