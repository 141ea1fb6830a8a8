"""`trigger show NAME` describes one trigger and its latest events; against a real nats-server."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli import run_cli

from noetl_stream.bus.nats_server import NatsServer

pytestmark = pytest.mark.e2e

EXAMPLES = Path(__file__).resolve().parents[2] / "playbooks" / "examples" / "triggers"


async def test_show_names_state_source_next_fires_and_events(nats_server: NatsServer) -> None:
    url = ["--nats-url", nats_server.url]
    for args in (("register", str(EXAMPLES / "report.yaml")),
                 ("trigger", "apply", str(EXAMPLES / "nightly.yaml"))):
        out = await run_cli(*args, *url)
        assert out.returncode == 0, out.stderr
    out = await run_cli("trigger", "show", "nightly", *url)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == "trigger nightly"
    assert lines[1].split() == ["state", "active"]
    assert "cron 0 2 * * * (Europe/Amsterdam)" in lines[2]
    assert lines[5].split()[:2] == ["next", "fire"] and lines[5].split()[2].endswith("Z")
    assert lines[6].split()[0] == "then" and lines[6].count(",") == 3  # four more fire times
    assert lines[-1].split()[1:3] == ["applied", "state"], out.stdout

    assert (await run_cli("trigger", "pause", "nightly", *url)).returncode == 0
    out = await run_cli("trigger", "show", "nightly", "--json", *url)
    assert out.returncode == 0, out.stderr
    shown = json.loads(out.stdout)
    assert (shown["state"], shown["next_fire"], shown["next_fires"]) == ("paused", None, [])
    assert [e["event_type"] for e in shown["events"]] == ["trigger.applied", "trigger.paused"]

    out = await run_cli("trigger", "show", "nightly", "--events", "1", *url)
    assert out.stdout.splitlines()[-1].split()[1] == "paused", out.stdout

    missing = await run_cli("trigger", "show", "nosuch", *url)
    assert missing.returncode == 2
    assert missing.stderr.strip().splitlines() == [
        "noetl-stream: no trigger named nosuch (`noetl-stream trigger list` shows them)"]
