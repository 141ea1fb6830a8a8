"""The headline table of `make bench` (bench/summary.py): a missed target says what bound it."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import ModuleType

BENCH = Path(__file__).resolve().parents[2] / "bench"


def _summary() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_summary", BENCH / "summary.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _write(folder: Path, name: str, doc: dict[str, object]) -> None:
    (folder / name).write_text(json.dumps(doc))


def test_a_missed_w3_is_set_against_the_delivery_rules_of_the_same_run(tmp_path: Path) -> None:
    _write(tmp_path, "latest.json", {"rows": [
        {"workload": "RAW", "ms_per_step": 2.5},
        {"workload": "RAW-W3", "steps_per_s": 1600.0},
        {"workload": "W3", "steps_per_s": 900.0,
         "extra": {"cpu_python_pct": 55.0, "cpu_nats_pct": 60.0}}]})
    text, doc = _summary().report(tmp_path)
    w3 = next(p for p in doc["probes"] if p["probe"].startswith("W3 in-process"))
    assert w3["met"] is False
    assert "56% of RAW-W3 in this run (half of it: met)" in w3["why"]
    assert "waits for stored writes" in w3["why"]
    assert w3["why"] in text
    assert doc["all_met"] is False


def test_python_steps_are_set_against_noop_steps_of_the_same_run(tmp_path: Path) -> None:
    _write(tmp_path, "services.json", {"rows": [
        {"workload": "RAW", "value": 2.0},
        {"workload": "PROBE-idle", "extra": {"p50_ms": 20.0, "p99_ms": 30.0}},
        {"workload": "W3-noop", "value": 3.0, "extra": {"steps_per_s": 400.0}},
        {"workload": "W3-python", "value": 4.0, "extra": {"steps_per_s": 300.0}}]})
    _, doc = _summary().report(tmp_path)
    by_name = {p["probe"].split(":")[0].split(" (")[0]: p for p in doc["probes"]}
    assert "python at 75% of it" in by_name["W3 services python"]["why"]
    assert "4.0 ms per hop of its 5" in by_name["PROBE-idle"]["why"]
    assert by_name["PROBE-idle"]["met"] is False


def _stores(alone_all: dict[str, float], w3_all: dict[str, float],
            events: dict[str, float]) -> dict[str, object]:
    return {"workload": "W3-stores", "steps": 1000, "extra": {
        "alone": {"all": alone_all}, "alone_steps": 100, "alone_ms_per_step": 4.0,
        "w3": {"all": w3_all, "NOETL_EVENTS": events}}}


def test_a_missed_w3_says_how_long_nats_server_took_to_store_a_write(tmp_path: Path) -> None:
    _write(tmp_path, "latest.json", {"rows": [
        {"workload": "RAW-W3", "steps_per_s": 1600.0},
        {"workload": "W3", "steps_per_s": 600.0, "extra": {}},
        _stores({"count": 400, "p50_ms": 0.3, "sum_ms": 150.0},
                {"count": 4200, "p50_ms": 24.0, "sum_ms": 1e5},
                {"count": 3150, "p50_ms": 31.0, "sum_ms": 9e4})]})
    _, doc = _summary().report(tmp_path)
    w3 = next(p for p in doc["probes"] if p["probe"].startswith("W3 in-process"))
    assert "a stored write took p50 24.0 ms under W3 against 0.30 ms for a chain alone" in w3["why"]
    assert "NOETL_EVENTS 31.0 ms, 3.1 acknowledged writes a step" in w3["why"]


def test_a_missed_run_step_says_what_of_a_step_is_storing(tmp_path: Path) -> None:
    _write(tmp_path, "latest.json", {"rows": [
        _stores({"count": 400, "p50_ms": 0.3, "sum_ms": 150.0},
                {"count": 4200, "p50_ms": 24.0, "sum_ms": 1e5}, {})]})
    _write(tmp_path, "cli_run.json", {"raw_ms": 2.0, "rows": [
        {"workload": "RUN-step-100", "ms_per_step": 4.2, "vs_raw": 2.1, "met": False,
         "target": "<= 1.5 x RAW (3.00 ms)"},
        {"workload": "RUN-step-300", "ms_per_step": 2.8, "vs_raw": 1.4, "met": True,
         "target": "<= 1.5 x RAW (3.00 ms)"}]})
    _, doc = _summary().report(tmp_path)
    by_name = {p["probe"].split(":")[0]: p for p in doc["probes"]}
    assert by_name["RUN-step-100"]["why"] == (
        "a chain alone, in process: 4.00 ms a step, of which 1.50 ms inside nats-server storing "
        "its 4.0 acknowledged writes (p50 0.30 ms each, fsync included) and 2.50 ms the "
        "server's and the worker's Python and the hops between the processes' loops")
    assert by_name["RUN-step-300"]["why"] == ""
