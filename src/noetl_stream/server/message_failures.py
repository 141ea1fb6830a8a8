"""What the server does with a request or event its handler could not take.

Each message is settled as bus/dispositions.py says: a bug in our code is dead-lettered and
terminated, NATS trouble is handed back for redelivery. A message is settled on its own, so one
that fails never takes the others of its batch with it, and a dead-letter copy that cannot be
written is only logged: the message is settled either way and can never hold the consumer.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

from nats.aio.msg import Msg

from noetl_stream import jsonutil
from noetl_stream.bus.connection import Bus
from noetl_stream.bus.dead_letters import dead_letter_message
from noetl_stream.bus.delivery import renew_leases
from noetl_stream.bus.dispositions import Failure, classify, settle
from noetl_stream.bus.storage import while_storage_refused
from noetl_stream.messages import Malformed, reply_address
from noetl_stream.server import request_answers as answers

log = logging.getLogger("noetl_stream.server")


async def guarded(bus: Bus, msg: Msg, handle: Callable[[Msg], Awaitable[None]]) -> None:
    """Run `handle(msg)`; a failure settles the message as dispositions.py says (a bug is
    dead-lettered, NATS trouble handed back), instead of failing the batch.
    """
    try:
        await while_storage_refused(lambda: handle(msg), what=f"message on {msg.subject[:200]}",
                                    keep=lambda: renew_leases([msg]))
    except asyncio.CancelledError:
        raise
    except Exception as exc:
        await handler_failed(bus, [msg], exc)
        if classify(exc) is Failure.HANDLER_BUG:  # it will not come back: say so
            execution_id, reply_to = reply_address(jsonutil.loads_object(msg.data))
            with contextlib.suppress(Exception):
                await answers.reply(bus, reply_to, execution_id, [
                    f"the server failed on this request ({type(exc).__name__}); it is kept "
                    "in the dead-letter stream"])


async def handler_failed(bus: Bus, msgs: list[Msg], exc: Exception) -> None:
    """Settle `msgs`, whose handler raised `exc`, as its failure class says."""
    failure = classify(exc)
    if failure is Failure.HANDLER_BUG:
        log.error("server: %d message(s) on %s failed the handler; dead-lettered",
                  len(msgs), msgs[0].subject[:200], exc_info=exc)
        await dead_letter(bus, msgs, failure, f"{type(exc).__name__}: {exc}")
    else:
        log.warning("server: %d message(s) on %s not handled (%s: %s); handed back",
                    len(msgs), msgs[0].subject[:200], failure, exc)
    await asyncio.gather(*(settle(m, failure) for m in msgs))


async def dead_letter(bus: Bus, msgs: list[Msg], failure: Failure, detail: str) -> None:
    """Keep refused messages in NOETL_DLQ (a copy that cannot be written is logged: the
    message is settled either way, so it can never hold the consumer).
    """
    results = await asyncio.gather(*(dead_letter_message(bus, m, failure, detail)
                                     for m in msgs), return_exceptions=True)
    for result in results:
        if isinstance(result, BaseException):
            log.warning("dead letter not written: %s", result)


async def refuse_event(bus: Bus, msg: Msg, exc: Malformed) -> None:
    """An event no delivery can make valid: dead-lettered with the reason and terminated, so
    a flood of them costs one write each and holds up no other execution's events.
    """
    log.warning("event on %s refused (%s): %s", msg.subject[:200], exc.failure, exc)
    failure = classify(exc)
    await dead_letter(bus, [msg], failure, exc.reason)
    await settle(msg, failure)
