"""A write JetStream refuses for lack of room is written again with backoff, within a bound."""

from __future__ import annotations

import time

import pytest
from nats.js import errors as js_errors

from noetl_stream import config
from noetl_stream.bus.storage import storage_refusal, while_storage_refused
from noetl_stream.errors import InfrastructureError

FULL = js_errors.ServiceUnavailableError(code=503, err_code=10023,
                                         description="insufficient resources")


class Store:
    """Refuses the first `refusals` writes as a full store does, then stores."""

    def __init__(self, refusals: int, error: Exception = FULL) -> None:
        self.refusals = refusals
        self.error = error
        self.writes = 0
        self.kept = 0

    async def write(self) -> int:
        self.writes += 1
        if self.writes <= self.refusals:
            raise self.error
        return self.writes

    async def keep(self) -> None:
        self.kept += 1


async def test_a_write_refused_for_room_is_written_again_until_it_is_stored() -> None:
    store = Store(refusals=2)
    assert await while_storage_refused(store.write, what="test", keep=store.keep,
                                       bound_s=10) == 3
    assert store.kept >= 2  # the caller's leases were renewed while it waited


async def test_past_the_bound_the_refusal_is_raised() -> None:
    store = Store(refusals=100)
    started = time.monotonic()
    with pytest.raises(js_errors.ServiceUnavailableError) as raised:
        await while_storage_refused(store.write, what="test", bound_s=1.0)
    assert storage_refusal(raised.value)
    assert time.monotonic() - started <= 1.5
    assert store.writes == 2  # at 0 s and 0.5 s; the next wait (1 s) would pass the bound


async def test_any_other_error_is_raised_at_once() -> None:
    store = Store(refusals=5, error=js_errors.ServiceUnavailableError())
    with pytest.raises(js_errors.ServiceUnavailableError):
        await while_storage_refused(store.write, what="test", bound_s=10)
    assert store.writes == 1


@pytest.mark.parametrize(("raw", "expected"), [
    ("", 4 * 1024**3), ("8GiB", 8 * 1024**3), ("512MiB", 512 * 1024**2), ("2GB", 2 * 1000**3),
    ("1048576", 1024**2), ("0", 0),
])
def test_the_store_budget_reads_bytes_with_units(raw: str, expected: int,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NOETL_STREAM_STORE_BYTES", raw)
    assert config.store_bytes() == expected


@pytest.mark.parametrize("raw", ["lots", "-1GiB", "GiB"])
def test_a_store_budget_that_is_no_size_is_refused_with_its_name(
        raw: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NOETL_STREAM_STORE_BYTES", raw)
    with pytest.raises(InfrastructureError, match="NOETL_STREAM_STORE_BYTES"):
        config.store_bytes()
