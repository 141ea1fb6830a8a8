"""NOETL_STREAM_RETENTION: any duration from 1 s; the sweep's period follows it; what the sweep
counts as finished and old enough; no declared stream or store that holds work or history ages
anything out."""

from __future__ import annotations

import pytest

from noetl_stream import config
from noetl_stream.errors import InfrastructureError
from noetl_stream.server.retention import Kept, finished_among, sweep_period
from noetl_stream.subjects import load_topology


@pytest.mark.parametrize(("raw", "seconds"), [("", 30 * 86400.0), ("1s", 1.0), ("4s", 4.0),
                                              ("90m", 5400.0), ("2w", 14 * 86400.0), ("7", 7.0)])
def test_retention_takes_any_duration_from_one_second(
        raw: str, seconds: float, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NOETL_STREAM_RETENTION", raw)
    assert config.retention_s() == seconds


@pytest.mark.parametrize("raw", ["0s", "0.5s", "0", "soon", "-3s"])
def test_retention_below_one_second_or_unreadable_is_refused(
        raw: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NOETL_STREAM_RETENTION", raw)
    with pytest.raises(InfrastructureError, match="NOETL_STREAM_RETENTION"):
        config.retention_s()


def test_the_sweep_runs_every_quarter_retention_between_a_second_and_an_hour() -> None:
    assert sweep_period(1.0) == 1.0
    assert sweep_period(4.0) == 1.0
    assert sweep_period(40.0) == 10.0
    assert sweep_period(30 * 86400.0) == 3600.0


def test_only_executions_finished_a_retention_ago_are_purged_never_running_ones() -> None:
    kept = [Kept("run", "running", started_at=0.0, written_at=0.0),
            Kept("old", "completed", started_at=1.0, written_at=10.0),
            Kept("young", "failed", started_at=2.0, written_at=97.0),
            Kept("older", "failed", started_at=0.5, written_at=5.0)]
    found = finished_among(kept, older_than_s=4.0, status=None, now=100.0)
    assert [f.execution_id for f in found] == ["older", "old"]
    failed = finished_among(kept, older_than_s=4.0, status="failed", now=100.0)
    assert [f.execution_id for f in failed] == ["older"]


def test_no_stream_or_store_holding_work_or_history_has_an_age_limit() -> None:
    topo = load_topology()
    ages = {s.name: s.max_age_s for s in topo.streams}
    for name in ("NOETL_EVENTS", "NOETL_COMMANDS", "NOETL_REQUESTS", "NOETL_ROUTER",
                 "NOETL_ADVISORIES"):
        assert ages[name] == 0, name
    assert all(o.ttl_s is None for o in topo.object_stores)
    ttl = {b.name: b.ttl_s for b in topo.buckets}
    for bucket in ("noetl_executions", "noetl_step_results", "noetl_vars"):
        assert ttl[bucket] is None
