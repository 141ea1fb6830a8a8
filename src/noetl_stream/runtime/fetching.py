"""One pull from a durable consumer, for the long-running fetch loops of server, worker and the
dead-letter service.

A loop must outlive everything NATS can answer while it is still up: a timeout when nothing is
pending, and, while a node fails over or the connection reconnects, JetStream errors (503, no
responders, connection closed). Those end a fetch, never the loop; a short pause keeps a loop that
keeps failing from spinning.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from nats.aio.msg import Msg
from nats.errors import TimeoutError as NatsTimeoutError

RETRY_PAUSE_S = 0.5


async def fetch_batch(sub: Any, batch: int, log: logging.Logger, *,
                      timeout_s: float = 1.0) -> list[Msg]:
    """Up to `batch` messages from `sub`; [] when none came or NATS could not answer now."""
    try:
        msgs: list[Msg] = await sub.fetch(batch, timeout=timeout_s)
        return msgs
    except (TimeoutError, NatsTimeoutError):
        return []
    except asyncio.CancelledError:
        raise
    except Exception as exc:
        log.warning("fetch from %s failed (%s); retrying", _consumer_name(sub), exc or type(exc))
        await asyncio.sleep(RETRY_PAUSE_S)
        return []


def _consumer_name(sub: Any) -> str:
    return str(getattr(sub, "_consumer", None) or "consumer")
