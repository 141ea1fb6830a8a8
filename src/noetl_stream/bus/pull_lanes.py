"""How a pull consumer splits its credit so that a request is always waiting (bus/pull.py).

A pull request expires (nats-server answers 408) and the consumer asks again; between the two
no request of it waits on nats-server, and a message stored meanwhile waits for the new one (on a
busy loop, milliseconds). A request cannot be withdrawn, so asking again before one expires would
ask for more than the owner can take. Instead the credit is split in two *lanes*, each asking
with its own inbox for its share, and each lane's requests expire on its own grid of times, the
two grids half a spacing apart: when one lane's request expires, the other's is waiting, and the
first asks again long before the other's ends. A credit of one cannot be split: such a consumer
has one lane, and the moment between an expiry and the next request remains.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from nats.aio.subscription import Subscription


@dataclass
class Lane:
    """One share of a consumer's credit: asked for on its own inbox. `pending` is requested and
    not yet delivered, `owed` granted and not yet requested; with what the owner holds of it,
    never more than `credit`.
    """

    index: int
    credit: int
    owed: int
    pending: int = 0
    inbox: str = ""
    sub: Subscription | None = None

    @property
    def room(self) -> int:
        """What of this lane's share the owner holds (granted back, it returns here)."""
        return self.credit - self.pending - self.owed


def lanes_of(credit: int) -> list[Lane]:
    """Two lanes sharing `credit` (one when it is a single message)."""
    if credit < 2:
        return [Lane(0, credit, credit)]
    first = (credit + 1) // 2
    return [Lane(0, first, first), Lane(1, credit - first, credit - first)]


def lane_expiry(now: float, epoch: float, expires_s: float, lane: int, lanes: int) -> float:
    """Seconds until a request `lane` asks at `now` expires: on that lane's grid of times (one
    every half of `expires_s`, from `epoch`, the second lane's a quarter of it later), at least
    half of `expires_s` away and less than all of it. A single lane expires after `expires_s`.
    """
    if lanes < 2:
        return expires_s
    spacing = expires_s / 2
    offset = epoch + lane * spacing / 2
    earliest = now + spacing
    steps = math.ceil((earliest - offset) / spacing)
    return offset + steps * spacing - now
