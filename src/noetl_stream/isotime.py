"""Epoch seconds as the ISO-8601 text every event and log line carries. Apart from events.py,
whose models the pure router imports: formatting a time needs `datetime`, which the router's
modules must not import (tests/unit/test_router_purity.py).
"""

from __future__ import annotations

import math
from datetime import UTC, datetime

# The last whole second formatted, and its text up to the seconds: events come many a second,
# and formatting the date is most of the cost of a stamp. A tuple, so that it is replaced whole.
_last_second: tuple[int, str] = (0, "1970-01-01T00:00:00")


def iso_time(epoch_s: float) -> str:
    """Epoch seconds as ISO-8601 UTC with microseconds and a `Z`: `2026-01-02T03:04:05.678901Z`."""
    global _last_second
    # Rounded to the microsecond half to even, as `datetime.fromtimestamp` rounds it.
    fraction, whole = math.modf(epoch_s)
    micros = round(fraction * 1e6)
    if micros >= 1_000_000:
        whole, micros = whole + 1, micros - 1_000_000
    elif micros < 0:
        whole, micros = whole - 1, micros + 1_000_000
    second = int(whole)
    last = _last_second
    if last[0] != second:
        text = datetime.fromtimestamp(second, UTC).isoformat(timespec="seconds")[:-6]
        last = _last_second = (second, text)
    return f"{last[1]}.{micros:06d}Z"
