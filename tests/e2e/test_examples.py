"""The example playbooks that need no outside service run and give their documented results."""

from __future__ import annotations

from pathlib import Path

import pytest
from cli import run_cli

from noetl_stream.bus.nats_server import free_port
from optional_extras import needs_duckdb

EXAMPLES = Path(__file__).resolve().parents[2] / "playbooks" / "examples"

pytestmark = pytest.mark.e2e


@needs_duckdb
async def test_sink_example_stores_every_iteration_in_duckdb() -> None:
    result = await run_cli("run", str(EXAMPLES / "sink_duckdb.yaml"), "--json", "-q")

    assert result.returncode == 0, result.stderr
    summary = result.summary
    assert summary["result"]["rows"] == [{"orders": 3, "amount": 200}]
    assert summary["steps"]["price"]["result"] == [
        {"id": 1, "amount": 60}, {"id": 2, "amount": 24}, {"id": 3, "amount": 116}]


async def test_keychain_example_reads_static_and_env_entries() -> None:
    result = await run_cli("run", str(EXAMPLES / "keychain.yaml"), "--json", "-q")

    assert result.returncode == 0, result.stderr
    assert result.summary["result"] == {"message": "Hello, world!", "home_is_set": True}


async def test_case_pagination_example_fails_when_its_api_is_down() -> None:
    closed = f"http://127.0.0.1:{free_port()}"
    out = await run_cli("run", str(EXAMPLES / "case_pagination.yaml"), "--json", "--quiet",
                        "--set", f"api_url={closed}")

    assert out.returncode == 1, out.stdout
    summary = out.summary
    assert summary["status"] == "failed"
    assert summary["error"]["step"] == "fetch_all_pages"
    assert summary["error"]["kind"] in ("connection", "http")
    assert "summarize" not in summary["steps"] or summary["steps"]["summarize"]["runs"] == 0


async def test_scripts_and_context_example_reads_its_script_files() -> None:
    result = await run_cli("run", str(EXAMPLES / "scripts_and_context.yaml"), "--json", "-q",
                           "--set", "limit=5", cwd=Path("/"))

    assert result.returncode == 0, result.stderr
    summary = result.summary
    assert summary["result"] == {"title": "first 5", "mean": 3, "total": 15,
                                 "check": "{sum} == 15",
                                 "execution_id": summary["execution_id"]}


@pytest.mark.parametrize(("sets", "status", "ran"), [
    ((), "completed", "report"),
    (("--set", "fail=true"), "completed", "cleanup"),
    (("--set", "fail=true", "--set", "cleanup_on_error=false"), "failed", None),
])
async def test_failure_routing_example_hands_a_failure_on_only_where_written_for_it(
        sets: tuple[str, ...], status: str, ran: str | None) -> None:
    result = await run_cli("run", str(EXAMPLES / "failure_routing.yaml"), "--json", "-q", *sets)

    summary = result.summary
    assert summary["status"] == status, result.stderr
    completed = {name for name, step in summary["steps"].items() if step["status"] == "completed"}
    assert completed - {"start", "load"} == ({ran} if ran else set())
    if status == "failed":
        assert result.returncode == 1
        assert summary["error"]["step"] == "load"
        assert "the warehouse refused the batch" in summary["error"]["message"]
