"""One copy of a command runs per attempt: the worker claims the attempt before running it.

A command's `Nats-Msg-Id` names its attempt (`cmd:<step_run>:<iteration>:<attempt>`). The stream
drops a second copy published inside its duplicate window, but not one published after it: a
server that reads a state cold and cannot tell whether its outbox went out publishes it again
(server/outbox_marks.py). Such a copy is another stored message; the same message handed to
another worker after a lease ran out must run again, since its first worker may have died with
it.

A stored message is told from a copy by its `Noetl-Publish-Id` header, a token the server draws
for each publish of an outbox (bus/publish.py): every delivery of one stored message carries
the same, and so does that message restored from a backup (restored messages get new stream
sequences); a copy published again carries another. A command without it (published by a
release before this header) is known by its stream sequence instead.

So before running, the worker writes the claim `<execution_id>.claim.<digest of the msg id>` to KV
`noetl_step_results`, holding that identity, only if the key is new (a revision-checked write
at 0). If the key exists, the claim is read: the same identity is this message (an earlier
delivery claimed it and was lost), which runs; another is another copy of the attempt, taken
before (it runs, ran, or comes back itself): this one is acknowledged without running. Once the
outcome is stored the claim is marked finished, so a redelivery of a message whose run ended
(its acknowledgement was lost) does not run it again either. The claim goes with the
execution's step results (purged by key prefix).
"""

from __future__ import annotations

import hashlib
import logging
import time

from nats.aio.msg import Msg
from nats.js.errors import KeyWrongLastSequenceError, NotFoundError

from noetl_stream import jsonutil
from noetl_stream.bus.connection import Bus
from noetl_stream.bus.delivery import delivery_of
from noetl_stream.bus.publish import PUBLISH_ID_HEADER
from noetl_stream.formats import CLAIM
from noetl_stream.state.step_results import BUCKET

log = logging.getLogger("noetl_stream.worker")


def claim_key(execution_id: str, msg_id: str) -> str:
    return f"{execution_id}.claim.{hashlib.sha256(msg_id.encode()).hexdigest()[:32]}"


async def first_copy(bus: Bus, msg: Msg, execution_id: str) -> bool:
    """Whether this delivery of a command may run: when it claims its attempt, or the claim is
    its own message's. A command without a msg id, or not delivered by JetStream, has nothing to
    claim by and runs.
    """
    identity = _identity(msg)
    if identity is None:
        return True
    msg_id, copy = identity
    key = claim_key(execution_id, msg_id)
    claim = CLAIM.stamp({"msg_id": msg_id, "copy": copy, "claimed_at": time.time()})
    try:
        await bus.stored.update(BUCKET, key, jsonutil.dumps(claim), 0)
        return True
    except KeyWrongLastSequenceError:
        pass
    holder, ended = await _claimed_by(bus, key)
    if holder == copy and ended:
        log.info("command %s already ran to its outcome (its acknowledgement was lost): "
                 "acknowledged without running again", msg_id)
        return False
    if holder is None or holder == copy:
        return True  # this message's own claim (an earlier delivery), or one removed since
    log.warning("command %s (%s) is a copy published again after the duplicate window; the "
                "copy %s took the attempt: acknowledged without running", msg_id, copy, holder)
    return False


def _identity(msg: Msg) -> tuple[str, str] | None:
    """The command's msg id and which stored copy of it this is; None when it has no msg id or
    did not come from JetStream (nothing to claim by).
    """
    headers = msg.headers or {}
    msg_id = headers.get("Nats-Msg-Id")
    delivery = delivery_of(msg)
    if not msg_id or delivery is None:
        return None
    publish_id = headers.get(PUBLISH_ID_HEADER)
    return msg_id, f"publish:{publish_id}" if publish_id else f"seq:{delivery.stream_seq}"


async def finished(bus: Bus, msg: Msg, execution_id: str) -> None:
    """Mark the claim of this message's attempt finished, once its outcome is stored: a
    redelivery (the acknowledgement that follows was lost) is then acknowledged without running
    again. A plain publish: a mark that is lost costs only that re-run, as before claims.
    """
    identity = _identity(msg)
    if identity is None:
        return
    msg_id, copy = identity
    claim = CLAIM.stamp({"msg_id": msg_id, "copy": copy, "claimed_at": time.time(),
                         "finished": True})
    await bus.nc.publish(f"$KV.{BUCKET}.{claim_key(execution_id, msg_id)}",
                         jsonutil.dumps(claim))


async def _claimed_by(bus: Bus, key: str) -> tuple[str | None, bool]:
    """The copy a claim holds (None when it is gone) and whether its run finished;
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
    copy = claim.get("copy")
    # A claim that names no copy is another copy's.
    return (copy if isinstance(copy, str) else "?"), claim.get("finished") is True
