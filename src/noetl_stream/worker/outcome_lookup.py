"""Whether a command's attempt already stored its outcome, read back from the events stream.

An outcome is published under a msg id derived from its step run and iteration
(`evt:<execution>:<step.done|step.failed>:<step run>:<iteration>`, and the loop forms), on its
pool's outcome subject. JetStream cannot look a message up by msg id, so the execution's outcomes
of that pool are scanned from a start time on, headers only, for one of the attempt's two ids.
Only a worker that finds its own claim on a command asks (a redelivery: its first worker died,
or its acknowledgement was lost), so the scan is off the path of a step.

The consumer is named (`outcome_<hex>`) and created through the named create subject, the one
form a worker's NATS user may use on the events stream (deploy/nats/accounts); it is pushed to
the worker's own inbox and never deleted (restricted users may not): without interest it goes
after its inactive threshold.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta

from nats.aio.msg import Msg
from nats.errors import Error as NatsError
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

from noetl_stream import ids
from noetl_stream.bus.connection import Bus
from noetl_stream.bus.event_feed import EVENTS_STREAM

log = logging.getLogger("noetl_stream.worker")

CONSUMER_PREFIX = "outcome_"
CREATE_TIMEOUT_S = 5.0
READ_TIMEOUT_S = 10.0
INACTIVE_THRESHOLD_S = 10.0
# The claim's time is its bucket's clock and the outcome's the events stream's: on a cluster two
# leaders' clocks. The scan starts this much earlier; a wider start only costs reading more.
CLOCK_MARGIN = timedelta(seconds=60)


@dataclass(frozen=True)
class AttemptOutcome:
    """Where the outcome of one command's attempt is stored, and under which msg ids."""

    execution_id: str
    step_run_id: str
    iteration: int | None
    pool: str

    def subject_filter(self, bus: Bus) -> str:
        """The execution's outcomes of the pool, of the step form or the loop form: the
        outcome subjects are `<etype>.<pool>`, so `step.*.<pool>` takes no `step.started`.
        """
        kind = "step.*" if self.iteration is None else "loop.iteration.*"
        return bus.topology.outcome_subject(self.execution_id, kind, self.pool)

    def msg_ids(self) -> frozenset[str]:
        kinds = (("step.done", "step.failed") if self.iteration is None
                 else ("loop.iteration.done", "loop.iteration.failed"))
        return frozenset(ids.event_msg_id(self.execution_id, etype, self.step_run_id,
                                          self.iteration) for etype in kinds)


async def outcome_stored(bus: Bus, attempt: AttemptOutcome, since: datetime | None) -> bool:
    """Whether the events stream holds the attempt's outcome, stored at or after `since` (less
    CLOCK_MARGIN; None: any time). A read that stalls for READ_TIMEOUT_S counts as not found:
    the attempt then runs again, which a redelivery may always do (docs/reliability.md).
    """
    wanted = attempt.msg_ids()
    inbox = bus.nc.new_inbox()
    arrived: asyncio.Queue[Msg] = asyncio.Queue()

    async def deliver(msg: Msg) -> None:
        arrived.put_nowait(msg)

    sub = await bus.nc.subscribe(inbox, cb=deliver)
    try:
        info = await bus.js.add_consumer(
            EVENTS_STREAM, _scan(attempt.subject_filter(bus), inbox, since),
            timeout=CREATE_TIMEOUT_S)
        try:
            async with asyncio.timeout(READ_TIMEOUT_S):
                for _ in range(int(info.num_pending or 0)):
                    msg = await arrived.get()
                    if (msg.headers or {}).get("Nats-Msg-Id") in wanted:
                        return True
        except TimeoutError:
            log.warning("reading the outcomes on %s stalled after %g s: the command is taken "
                        "as not run", attempt.subject_filter(bus), READ_TIMEOUT_S)
        return False
    finally:
        with contextlib.suppress(NatsError):
            await sub.unsubscribe()


def _scan(subject_filter: str, inbox: str, since: datetime | None) -> ConsumerConfig:
    config = ConsumerConfig(
        name=f"{CONSUMER_PREFIX}{secrets.token_hex(8)}", deliver_subject=inbox,
        filter_subject=subject_filter, ack_policy=AckPolicy.NONE, headers_only=True,
        mem_storage=True, num_replicas=1, inactive_threshold=INACTIVE_THRESHOLD_S)
    if since is None:
        config.deliver_policy = DeliverPolicy.ALL
    else:
        config.deliver_policy = DeliverPolicy.BY_START_TIME
        config.opt_start_time = since - CLOCK_MARGIN
    return config
