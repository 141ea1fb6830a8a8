"""Whether a command's attempt already stored its outcome, read back from the events stream.

An outcome is published under a msg id derived from its step run and iteration
(`evt:<execution>:<step.done|step.failed>:<step run>:<iteration>`, and the loop forms), on its
pool's outcome subject. JetStream cannot look a message up by msg id, so the execution's outcomes
of that pool are read from a start time on, headers only (worker/event_scan.py, consumers named
`outcome_<hex>`), for one of the attempt's two ids. Only a worker that finds its own start or
claim on a command asks (a redelivery: its first worker died, or its acknowledgement was lost),
so the scan is off the path of a step.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime

from nats.aio.msg import Msg

from noetl_stream import ids
from noetl_stream.bus.connection import Bus
from noetl_stream.worker.event_scan import READ_TIMEOUT_S, EventScan, scan_events

log = logging.getLogger("noetl_stream.worker")

CONSUMER_PREFIX = "outcome_"


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
    event_scan.CLOCK_MARGIN; None: any time). A read that stalls for READ_TIMEOUT_S counts as not found:
    the attempt then runs again, which a redelivery may always do (docs/reliability.md).
    """
    wanted = attempt.msg_ids()
    found = False

    def take(msg: Msg) -> bool:
        nonlocal found
        found = (msg.headers or {}).get("Nats-Msg-Id") in wanted
        return found

    subject = attempt.subject_filter(bus)
    try:
        await scan_events(bus, EventScan(CONSUMER_PREFIX, subject, since=since), take)
    except TimeoutError:
        log.warning("reading the outcomes on %s stalled after %g s: the command is taken "
                    "as not run", subject, READ_TIMEOUT_S)
    return found
