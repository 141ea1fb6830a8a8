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
delivery claimed it and was lost), which runs unless that delivery's outcome is stored; another
is another copy of the attempt, taken before (it runs, ran, or comes back itself): this one is
acknowledged without running. The stored outcome is the proof that the run ended: its msg id is
derived from the command's step run and iteration, and it is looked up in the events stream from
the claim's time on (worker/outcome_lookup.py), only on such a redelivery, so a step writes the
claim and nothing else here. Claims of earlier releases marked `finished` once the outcome was
stored; such a mark is still honoured. The claim goes with the execution's step results (purged
by key prefix).
"""

from __future__ import annotations

import hashlib
import logging
import time
from datetime import datetime

from nats.aio.msg import Msg
from nats.js.errors import KeyWrongLastSequenceError, NotFoundError

from noetl_stream import jsonutil
from noetl_stream.bus.connection import Bus
from noetl_stream.bus.delivery import delivery_of
from noetl_stream.bus.publish import PUBLISH_ID_HEADER
from noetl_stream.formats import CLAIM
from noetl_stream.messages import Command
from noetl_stream.state.step_results import BUCKET
from noetl_stream.worker.outcome_lookup import AttemptOutcome, outcome_stored

log = logging.getLogger("noetl_stream.worker")


def claim_key(execution_id: str, msg_id: str) -> str:
    return f"{execution_id}.claim.{hashlib.sha256(msg_id.encode()).hexdigest()[:32]}"


async def first_copy(bus: Bus, msg: Msg, command: Command, pool: str) -> bool:
    """Whether this delivery of a command may run: when it claims its attempt, or the claim is
    its own message's and no outcome of it is stored. A command without a msg id, or not
    delivered by JetStream, has nothing to claim by and runs.
    """
    identity = _identity(msg)
    if identity is None:
        return True
    msg_id, copy = identity
    execution_id = command.execution_id
    key = claim_key(execution_id, msg_id)
    claim = CLAIM.stamp({"msg_id": msg_id, "copy": copy, "claimed_at": time.time()})
    try:
        await bus.stored.update(BUCKET, key, jsonutil.dumps(claim), 0)
        return True
    except KeyWrongLastSequenceError:
        pass
    holder, ended, claimed = await _claimed_by(bus, key)
    if holder == copy and not ended:
        ended = await outcome_stored(bus, AttemptOutcome(
            execution_id, command.step_run_id, command.iteration, pool), claimed)
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


async def _claimed_by(bus: Bus, key: str) -> tuple[str | None, bool, datetime | None]:
    """The copy a claim holds (None when it is gone), whether it is marked finished (by an
    earlier release) and when it was stored; a get of the key's last message, without opening
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
