"""One copy of a command runs per attempt: the worker claims the attempt before running it.

A command's `Nats-Msg-Id` names its attempt (`cmd:<step_run>:<iteration>:<attempt>`). The stream
drops a second copy published inside its duplicate window, but not one published after it: a
server that reads a state cold and cannot tell whether its outbox went out publishes it again
(runtime/outbox_marks.py). Such a copy is another stored message, with its own stream sequence;
the same message handed to another worker after a lease ran out keeps its sequence, and must run
again, since its first worker may have died with it.

So before running, the worker writes the claim `<execution_id>.claim.<digest of the msg id>` to KV
`noetl_step_results`, holding the message's stream sequence, only if the key is new (a
revision-checked write at 0). If the key exists, the claim is read: the same sequence is this
message (an earlier delivery claimed it and was lost), which runs; another sequence is another
copy of the attempt, taken before (it runs, ran, or comes back itself): this one is acknowledged
without running. Once the outcome is stored the claim is marked finished, so a redelivery of a
message whose run ended (its acknowledgement was lost) does not run it again either. The claim
goes with the execution's step results (purged by key prefix).
"""

from __future__ import annotations

import hashlib
import logging
import time

from nats.aio.msg import Msg
from nats.js.errors import KeyWrongLastSequenceError, NotFoundError

from noetl_stream import jsonutil
from noetl_stream.formats import CLAIM
from noetl_stream.runtime.connection import Bus
from noetl_stream.runtime.delivery import delivery_of
from noetl_stream.state.step_results import BUCKET

log = logging.getLogger("noetl_stream.worker")


def claim_key(execution_id: str, msg_id: str) -> str:
    return f"{execution_id}.claim.{hashlib.sha256(msg_id.encode()).hexdigest()[:32]}"


async def first_copy(bus: Bus, msg: Msg, execution_id: str) -> bool:
    """Whether this delivery of a command may run: when it claims its attempt, or the claim is
    its own message's. A command without a msg id, or not delivered by JetStream, has nothing to
    claim by and runs.
    """
    msg_id = (msg.headers or {}).get("Nats-Msg-Id")
    delivery = delivery_of(msg)
    if not msg_id or delivery is None:
        return True
    key = claim_key(execution_id, msg_id)
    claim = CLAIM.stamp({"msg_id": msg_id, "stream_seq": delivery.stream_seq,
                         "claimed_at": time.time()})
    try:
        await bus.stored.update(BUCKET, key, jsonutil.dumps(claim), 0)
        return True
    except KeyWrongLastSequenceError:
        pass
    holder, finished = await _claimed_by(bus, key)
    if holder == delivery.stream_seq and finished:
        log.info("command %s already ran to its outcome (its acknowledgement was lost): "
                 "acknowledged without running again", msg_id)
        return False
    if holder is None or holder == delivery.stream_seq:
        return True  # this message's own claim (an earlier delivery), or one removed since
    log.warning("command %s (stream sequence %d) is a copy published again after the duplicate "
                "window; the copy at sequence %d took the attempt: acknowledged without running",
                msg_id, delivery.stream_seq, holder)
    return False


async def finished(bus: Bus, msg: Msg, execution_id: str) -> None:
    """Mark the claim of this message's attempt finished, once its outcome is stored: a
    redelivery (the acknowledgement that follows was lost) is then acknowledged without running
    again. A plain publish: a mark that is lost costs only that re-run, as before claims.
    """
    msg_id = (msg.headers or {}).get("Nats-Msg-Id")
    delivery = delivery_of(msg)
    if not msg_id or delivery is None:
        return
    claim = CLAIM.stamp({"msg_id": msg_id, "stream_seq": delivery.stream_seq,
                         "claimed_at": time.time(), "finished": True})
    await bus.nc.publish(f"$KV.{BUCKET}.{claim_key(execution_id, msg_id)}",
                         jsonutil.dumps(claim))


async def _claimed_by(bus: Bus, key: str) -> tuple[int | None, bool]:
    """The stream sequence a claim holds (None when it is gone) and whether its run finished;
    a get of the key's last message, without opening the bucket (a worker's NATS user may not
    list it, deploy/nats/accounts).
    """
    try:
        raw = await bus.js.get_msg(f"KV_{BUCKET}", subject=f"$KV.{BUCKET}.{key}")
    except NotFoundError:
        return None, False
    if not raw.data:
        return None, False  # a delete marker: no claim
    claim = CLAIM.read(jsonutil.loads_object(raw.data) or {})
    seq = claim.get("stream_seq")
    # A claim without a sequence is another copy's.
    return (seq if isinstance(seq, int) else -1), claim.get("finished") is True
