"""iso_time formats from a cached second: the text must be the one `datetime` writes, for any
time, on either side of a second's edge and of a microsecond's half."""

from __future__ import annotations

import random
from datetime import UTC, datetime

import pytest

from noetl_stream.isotime import iso_time


def by_datetime(epoch_s: float) -> str:
    return datetime.fromtimestamp(epoch_s, UTC).isoformat(timespec="microseconds")[:-6] + "Z"


@pytest.mark.parametrize("epoch_s", [
    0.0, 1.0, 0.9999995, 0.9999994999, 1_767_225_599.9999996, 1_767_225_600.0000004,
    1_767_225_599.999999, 1_700_000_000.0000005, 1_700_000_000.0000015, 1_700_000_000.5,
    -0.5, -1.0000005, 4_102_444_799.999999, 1_798_761_599.9999999,
])
def test_edges_read_as_datetime_writes_them(epoch_s: float) -> None:
    assert iso_time(epoch_s) == by_datetime(epoch_s)


def test_random_times_in_and_out_of_order_read_as_datetime_writes_them() -> None:
    rng = random.Random(7)
    times = [rng.uniform(0, 4_102_444_800) for _ in range(20_000)]
    near = [1_767_225_600 + rng.uniform(-2, 2) for _ in range(20_000)]  # around a year's edge
    for epoch_s in times + near + sorted(near):
        assert iso_time(epoch_s) == by_datetime(epoch_s), epoch_s


def test_the_shape() -> None:
    assert iso_time(1_767_225_600.25) == "2026-01-01T00:00:00.250000Z"
