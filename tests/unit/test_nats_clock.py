"""nats-server's RFC3339 times, with nanoseconds and offsets, read as POSIX seconds."""

from __future__ import annotations

import pytest

from noetl_stream.server.nats_clock import parse_ts


def test_nanoseconds_and_zones_are_read() -> None:
    assert parse_ts("2026-11-26T11:05:45.200545562Z") == pytest.approx(1795691145.200545562)
    assert parse_ts("2026-11-26T12:05:45+01:00") == 1795691145.0
    assert parse_ts("1970-01-01T00:00:01.5Z") == 1.5


def test_anything_else_is_refused() -> None:
    with pytest.raises(ValueError, match="RFC3339"):
        parse_ts("yesterday")
