"""Epoch seconds as the ISO-8601 text every event and log line carries. Apart from events.py,
whose models the pure router imports: formatting a time needs `datetime`, which the router's
modules must not import (tests/unit/test_router_purity.py).
"""

from __future__ import annotations

from datetime import UTC, datetime


def iso_time(epoch_s: float) -> str:
    """Epoch seconds as ISO-8601 UTC with microseconds and a `Z`: `2026-01-02T03:04:05.678901Z`."""
    # isoformat with a fixed precision writes the same text as strftime, in less time; every
    # event is stamped with it.
    return datetime.fromtimestamp(epoch_s, UTC).isoformat(timespec="microseconds")[:-6] + "Z"
