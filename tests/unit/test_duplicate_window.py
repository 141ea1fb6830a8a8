"""NOETL_STREAM_DUPLICATE_WINDOW: the window of the streams publishers write to, any duration from
one second up, never longer than a stream's max age."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from noetl_stream.errors import InfrastructureError
from noetl_stream.subjects import Topology, _window, load_topology

PUBLISHED = ("NOETL_REQUESTS", "NOETL_COMMANDS", "NOETL_EVENTS", "NOETL_DLQ")


@pytest.fixture(autouse=True)
def fresh_topology(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.delenv("NOETL_STREAM_DUPLICATE_WINDOW", raising=False)
    monkeypatch.delenv("NOETL_STREAM_RETENTION", raising=False)
    load_topology.cache_clear()
    yield
    load_topology.cache_clear()


def windows(topology: Topology) -> dict[str, float]:
    return {s.name: s.duplicate_window_s for s in topology.streams}


def test_twenty_minutes_by_default() -> None:
    got = windows(load_topology())
    assert {name: got[name] for name in PUBLISHED} == dict.fromkeys(PUBLISHED, 1200.0)
    assert got["NOETL_ROUTER"] == 120.0


@pytest.mark.parametrize(("raw", "seconds"), [("2s", 2.0), ("1", 1.0), ("90m", 5400.0),
                                              ("1h", 3600.0)])
def test_any_duration_from_one_second(monkeypatch: pytest.MonkeyPatch, raw: str,
                                      seconds: float) -> None:
    monkeypatch.setenv("NOETL_STREAM_DUPLICATE_WINDOW", raw)
    got = windows(load_topology())
    assert {name: got[name] for name in PUBLISHED} == dict.fromkeys(PUBLISHED, seconds)
    assert got["NOETL_ROUTER"] == 120.0  # internal: the router's copy keeps its own


@pytest.mark.parametrize("raw", ["0", "0.5s", "-3s", "soon"])
def test_less_than_a_second_or_no_duration_is_refused(monkeypatch: pytest.MonkeyPatch,
                                                      raw: str) -> None:
    monkeypatch.setenv("NOETL_STREAM_DUPLICATE_WINDOW", raw)
    with pytest.raises(InfrastructureError, match="NOETL_STREAM_DUPLICATE_WINDOW"):
        load_topology()


def test_the_window_never_outlasts_a_streams_max_age(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NOETL_STREAM_RETENTION", "60s")
    monkeypatch.setenv("NOETL_STREAM_DUPLICATE_WINDOW", "20m")
    topology = load_topology()
    events = next(s for s in topology.streams if s.name == "NOETL_EVENTS")
    # No stream holding work or history has a max age, whatever the retention: the window is
    # the configured one.
    assert (events.max_age_s, events.duplicate_window_s) == (0.0, 1200.0)
    assert windows(topology)["NOETL_COMMANDS"] == 1200.0
    # A stream declared with a max age gets a window no longer than it (JetStream refuses more).
    assert _window({"duplicate_window_s": 1200, "follows_duplicate_window": True,
                    "max_age_s": 60}, 1200.0) == 60.0
