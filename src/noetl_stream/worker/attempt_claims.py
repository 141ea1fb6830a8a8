"""One copy of a command runs per attempt: the attempt's `task.started`, stored, is its claim.

A command's `Nats-Msg-Id` names its attempt (`cmd:<step_run>:<iteration>:<attempt>`). The stream
drops a second copy published inside its duplicate window, but not one published after it: a
server that reads a state cold and cannot tell whether its outbox went out publishes it again
(server/outbox_marks.py), as does the stall check for a command it cannot find. Such a copy is
another stored message; the same message handed to another worker after a lease ran out must
run again, since its first worker may have died with it.

A stored message is told from a copy by its `Noetl-Publish-Id` header, a token the server draws
for each publish of an outbox (bus/publish.py): every delivery of one stored message carries
the same, and so does that message restored from a backup (restored messages get new stream
sequences); a copy published again carries another. A command without it (published by a
release before this header, or by the stall check) is known by its stream sequence instead.

Before running, the worker publishes the attempt's `task.started` and waits for the store's ack:
its msg id (`evt:<execution>:task.started:<step run>:<iteration>`, and `:<attempt>` for an
attempt other than the first) is the same for every copy and delivery of the attempt and another
for every other attempt (a step's next run has another run id), and its `Noetl-Copy` header
holds the copy's identity. Three cases:

- The ack says duplicate (a start of the attempt stored within the window): the start stored at
  the sequence the ack names is read back. Another copy's start: this copy is acknowledged
  without running. The same copy's (an earlier delivery of this message): it runs unless that
  delivery's outcome is stored.
- A delivery that may follow an earlier start beyond the window looks for it before publishing:
  a redelivery (its first delivery may have started long ago), and a command without the first
  publish's mark `Noetl-Publish: first` (a copy published again, or an earlier release's). It
  scans the execution's starts (worker/start_scan.py) from the command's stored time less a
  minute (a redelivery of a first publish: no start of its attempt can be older), or all of them
  (a copy: the first publish may be much older). The earliest start found decides as above; none
  found, it publishes its own.
- A first delivery of a first publish needs no look-up: every other copy of its attempt was
  stored after it, so their starts are younger than this command. When the command is older than
  half the duplicate window by the time its start is stored (it waited long for a worker), such
  a start may have left the window: the starts up to its own are read and the earliest one
  decides. So does a look-up whose publish came that long after it (a worker paused in between),
  and a command stored later than this host's clock says it is now (the clocks differ). The
  command's age is read on two clocks (its stored time is nats-server's): a worker whose clock
  runs more than half the window behind nats-server's may take a command older than the window
  for a young one.

The stored outcome is the proof that a run ended: its msg id is derived from the command's step
run and iteration, and it is looked up in the events stream from the start's time on
(worker/outcome_lookup.py), only on such a redelivery. A step's path writes the start and
nothing else here. A start the events stream has dropped at its byte bound is not found: its
attempt may run again, as a redelivery may.

Claims of the release before, a create-only KV write `<execution_id>.claim.<digest of the msg
id>` in `noetl_step_results` holding the copy (marked `finished` by releases before that), are
still read by every delivery that looks: the same copy runs unless finished or its outcome is
stored, another is acknowledged without running. They go with the execution's step results
(purged by key prefix).
"""

from __future__ import annotations

import hashlib
import logging
import time
from datetime import datetime
from typing import Any

from nats.aio.msg import Msg
from nats.js.errors import NotFoundError

from noetl_stream import ids, jsonutil
from noetl_stream.bus.connection import Bus
from noetl_stream.bus.delivery import Delivery, delivery_with_time, stored_time_of
from noetl_stream.bus.event_feed import EVENTS_STREAM
from noetl_stream.bus.publish import (
    COPY_HEADER,
    FIRST_PUBLISH,
    PUBLISH_ID_HEADER,
    PUBLISH_ROUND_HEADER,
    stamp,
)
from noetl_stream.bus.stored_publish import Stored
from noetl_stream.formats import CLAIM
from noetl_stream.messages import Command
from noetl_stream.state.step_results import BUCKET
from noetl_stream.subjects import Topology
from noetl_stream.worker.outcome_lookup import AttemptOutcome, outcome_stored
from noetl_stream.worker.start_scan import START, Scan, StoredStart, first_start, start_at

log = logging.getLogger("noetl_stream.worker")


def claim_key(execution_id: str, msg_id: str) -> str:
    """The KV key of an attempt's claim, as the release before wrote it."""
    return f"{execution_id}.claim.{hashlib.sha256(msg_id.encode()).hexdigest()[:32]}"


class AttemptStart:
    """One delivery of a command taking its attempt by storing the attempt's `task.started`."""

    def __init__(self, bus: Bus, msg: Msg, command: Command, pool: str,
                 delivered: tuple[Delivery, float | None] | None = None) -> None:
        self.bus = bus
        self.msg = msg
        self.command = command
        self.pool = pool
        # Its delivery and stored time, when the caller read them already (delivery_with_time).
        self.delivered = delivered if delivered is not None else delivery_with_time(msg)
        # The router sends attempt 1 of each step run and iteration (a step's next run has
        # another run id); another attempt would get its own start.
        again = (command.attempt,) if command.attempt != 1 else ()
        self.start_id = ids.event_msg_id(command.execution_id, START, command.step_run_id,
                                         command.iteration, *again)

    async def take(self, body: dict[str, Any]) -> bool:
        """Store `body` as the attempt's start, unless another copy took the attempt; whether
        this delivery may run. A command without a msg id, or not delivered by JetStream, has
        nothing to be told apart by: its start is stored and it runs.
        """
        headers = self.msg.headers or {}
        cmd_id = headers.get("Nats-Msg-Id")
        if not cmd_id or self.delivered is None:
            await self._publish(body, None)
            return True
        delivery, stored_s = self.delivered
        publish_id = headers.get(PUBLISH_ID_HEADER)
        copy = f"publish:{publish_id}" if publish_id else f"seq:{delivery.stream_seq}"
        first = headers.get(PUBLISH_ROUND_HEADER) == FIRST_PUBLISH
        checked_from = stored_s if stored_s is not None else 0.0
        if delivery.delivered > 1 or not first:
            checked_from = time.time()
            earlier = await self._earlier(cmd_id, copy, self._since(first))
            if earlier is not None:
                return earlier
        stored = await self._publish(body, copy)
        if stored.duplicate:
            return await self._decide(copy, await start_at(
                self.bus, self.command.execution_id, self.start_id, stored.seq))
        # The command's age by this host's clock against nats-server's: half the window
        # leaves room for the two clocks to differ, and a negative age says they do.
        if 0.0 <= time.time() - checked_from < _window_s(self.bus.topology) / 2:
            return True  # any earlier start is inside the window: the ack would have said so
        winner = await first_start(self.bus, Scan(self.command.execution_id, self.start_id,
                                                  since=self._since(first),
                                                  until_seq=stored.seq))
        return winner is None or winner.seq == stored.seq or await self._decide(copy, winner)

    async def _earlier(self, cmd_id: str, copy: str, since: datetime | None) -> bool | None:
        """Whether an earlier claim or start decides this delivery (None: none found)."""
        holder, ended, claimed = await _claimed_by(self.bus, claim_key(
            self.command.execution_id, cmd_id))
        if holder is not None:
            return await self._decide(copy, StoredStart(0, holder, claimed), ended)
        start = await first_start(self.bus, Scan(self.command.execution_id, self.start_id,
                                                 since=since))
        return None if start is None else await self._decide(copy, start)

    async def _decide(self, copy: str, start: StoredStart | None, ended: bool = False) -> bool:
        """Whether this copy runs, given the attempt's earlier start (or claim)."""
        if start is None:
            return True  # gone since (dropped at the stream's bound): nothing tells otherwise
        key = f"{self.start_id} ({copy})"
        if start.copy != copy:
            log.warning("command of %s is a copy published again after the duplicate window; "
                        "the copy %s took the attempt: acknowledged without running", key,
                        start.copy)
            return False
        if not ended:
            ended = await outcome_stored(self.bus, AttemptOutcome(
                self.command.execution_id, self.command.step_run_id, self.command.iteration,
                self.pool), start.stored_at)
        if ended:
            log.info("command of %s already ran to its outcome (its acknowledgement was lost): "
                     "acknowledged without running again", key)
        return not ended

    async def _publish(self, body: dict[str, Any], copy: str | None) -> Stored:
        headers = {"Nats-Msg-Id": self.start_id}
        if copy is not None:
            headers[COPY_HEADER] = copy
        subject = self.bus.topology.event_subject(self.command.execution_id, START)
        return await self.bus.stored.store(subject, jsonutil.dumps(stamp(body, self.start_id)),
                                           headers)

    def _since(self, first: bool) -> datetime | None:
        """Where a scan for earlier starts begins: a first publish's stored time (no start of
        its attempt is older than the command), else the beginning.
        """
        return stored_time_of(self.msg) if first else None


# topology id -> (the topology, its events stream's duplicate window): a topology is read once
# per process and never changed, and every command's start reads the window.
_WINDOWS: dict[int, tuple[Topology, float]] = {}


def _window_s(topology: Topology) -> float:
    """The events stream's duplicate window."""
    known = _WINDOWS.get(id(topology))
    if known is None or known[0] is not topology:
        window = next(s.duplicate_window_s for s in topology.streams if s.name == EVENTS_STREAM)
        known = _WINDOWS[id(topology)] = (topology, window)
    return known[1]


async def _claimed_by(bus: Bus, key: str) -> tuple[str | None, bool, datetime | None]:
    """The copy an earlier release's claim holds (None when there is none), whether it is
    marked finished and when it was stored; a get of the key's last message, without opening
    the bucket (a worker's NATS user may not list it, deploy/nats/accounts).
    """
    try:
        raw = await bus.js.get_msg(f"KV_{BUCKET}", subject=f"$KV.{BUCKET}.{key}")
    except NotFoundError:
        return None, False, None
    if not raw.data:
        return None, False, None  # a delete marker: no claim
    claim = CLAIM.read(jsonutil.loads_object(raw.data) or {})
    copy = claim.get("copy")
    # A claim that names no copy is another copy's.
    return (copy if isinstance(copy, str) else "?"), claim.get("finished") is True, raw.time
