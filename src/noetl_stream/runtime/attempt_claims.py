"""One copy of a command runs per attempt: the worker claims the attempt before running it.

A command's `Nats-Msg-Id` names its attempt (`cmd:<step_run>:<iteration>:<attempt>`). The stream
drops a second copy published inside its duplicate window, but not one published after it: a
server that reads a state cold and cannot tell whether its outbox went out publishes it again
(runtime/outbox_marks.py). Such a copy is a new message, delivered for the first time; the same
message handed to another worker after a lease ran out is delivered again (its delivery count is
above one) and must run, since its first worker may have died with it.

So on a first delivery the worker writes the claim `<execution_id>.claim.<digest of the msg id>`
to KV `noetl_step_results` only if the key is new (a revision-checked write at 0). If it exists,
another copy of the attempt was taken before (it runs, ran, or was handed back and will be
redelivered): this copy is acknowledged without running. A redelivery never asks. The claim goes
with the execution's step results (purged by key prefix).
"""

from __future__ import annotations

import hashlib
import logging
import time

from nats.aio.msg import Msg
from nats.js.errors import KeyWrongLastSequenceError

from noetl_stream import jsonutil
from noetl_stream.formats import CLAIM
from noetl_stream.runtime.connection import Bus
from noetl_stream.state.step_results import BUCKET

log = logging.getLogger("noetl_stream.worker")

def claim_key(execution_id: str, msg_id: str) -> str:
    return f"{execution_id}.claim.{hashlib.sha256(msg_id.encode()).hexdigest()[:32]}"


async def first_copy(bus: Bus, msg: Msg, execution_id: str, delivered: int) -> bool:
    """Whether this delivery of a command may run: a redelivery always may, a first delivery
    when it claims its attempt first. A command without a msg id (not published by a server)
    has nothing to claim by and runs.
    """
    msg_id = (msg.headers or {}).get("Nats-Msg-Id")
    if delivered > 1 or not msg_id:
        return True
    claim = jsonutil.dumps(CLAIM.stamp({"msg_id": msg_id, "claimed_at": time.time()}))
    try:
        await bus.stored.update(BUCKET, claim_key(execution_id, msg_id), claim, 0)
    except KeyWrongLastSequenceError:
        log.warning("command %s was published again after the duplicate window and another copy "
                    "of it was taken before: acknowledged without running", msg_id)
        return False
    return True
