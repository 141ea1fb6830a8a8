"""A nats-server whose disk really fills up (a tmpfs of its own, filled by another writer) while an
execution runs, with `noetl-stream server` and `worker` as separate processes.

Unlike a JetStream limit (tests/e2e/test_disk_full.py), "no space left on device" is met by
nats-server's file store itself: it logs a critical write error for the stream it was writing
(the events, the router's copies, the execution states or the commands: whichever wrote first)
and from then on answers no write to that stream, even once space is back, until it is
restarted; a failed copy into the router's stream disables JetStream altogether. The state
stays as it was. `status` must say what is stuck: an outcome the worker holds, events waiting
in NOETL_ROUTER, a command never stored, or a JetStream that answers nothing. The execution must
finish once space is back and nats-server restarted, and verify.

Needs root (mount); the shipped tests run as root.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from cli import CLI, run_cli
from processes import Processes

from noetl_stream.bus.connection import connect
from noetl_stream.bus.nats_server import free_port
from noetl_stream.testing.cluster import start_node, stop_node
from noetl_stream.testing.verifying import differences, verify_every_execution
from noetl_stream.testing.waiting import assert_eventually

pytestmark = pytest.mark.e2e

DISK = "48m"
STORE_BYTES = str(24 * 1024 * 1024)  # the streams' bounds fit; the disk is what runs out
PLAYBOOK = """\
apiVersion: noetl.io/v2
kind: Playbook
metadata:
  name: through-a-full-device
workflow:
  - step: slow
    tool:
      kind: python
      code: |
        import time
        time.sleep(10)
        result = {"slept": 10}
    next: [{step: after}]
  - step: after
    tool:
      kind: python
      input: {slept: "{{ slow.slept }}"}
      code: 'result = {"after": slept}'
"""


@pytest.fixture
def device(tmp_path: Path) -> Iterator[Path]:
    """A tmpfs of `DISK` mounted for the test."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    mount = tmp_path / "device"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={DISK}", "tmpfs", str(mount)],
                   check=True)
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


class Node:
    """nats-server with its store on the device and a `max_file_store` larger than the device,
    as when the disk is shared with other writers."""

    def __init__(self, folder: Path, store: Path) -> None:
        self.port = free_port()
        self.url = f"nats://127.0.0.1:{self.port}"
        self.conf = folder / "nats.conf"
        self.log = folder / "nats-server.log"
        self.conf.write_text(f"listen: 127.0.0.1:{self.port}\nmax_payload: 8MB\n"
                             f'jetstream {{\n  store_dir: "{store}"\n  max_file_store: 1G\n'
                             "  sync_interval: always\n}\n")
        self.process: subprocess.Popen[bytes] | None = None

    async def start(self) -> None:
        self.process = start_node(self.conf, self.log)

        async def answers() -> None:
            assert self.process is not None and self.process.poll() is None, \
                self.log.read_text()
            try:
                bus = await connect(self.url, name="test-probe")
            except Exception as exc:
                raise AssertionError(f"nats-server not up yet: {exc}") from exc
            await bus.close()

        await assert_eventually(answers)

    def stop(self) -> None:
        stop_node(self.process)
        self.process = None


@pytest.fixture
async def node(tmp_path: Path, device: Path) -> AsyncIterator[Node]:
    n = Node(tmp_path, device / "js")
    await n.start()
    try:
        yield n
    finally:
        n.stop()


def fill(device: Path) -> Path:
    """Write zeros to a file on the device until it has no byte left."""
    filler = device / "filler"
    with open(filler, "wb") as out, contextlib.suppress(OSError):
        block = b"\0" * (1024 * 1024)
        while True:
            out.write(block)
            out.flush()
    return filler


async def status(url: str, execution_id: str, env: dict[str, str]) -> tuple[dict[str, Any], str]:
    as_json = await run_cli("status", execution_id, "--json", "--nats-url", url, env=env)
    assert as_json.returncode == 0, as_json.stderr
    text = await run_cli("status", execution_id, "--nats-url", url, env=env)
    return json.loads(as_json.stdout), text.stdout


async def test_status_says_why_an_execution_waits_on_a_full_device_and_it_ends_once_repaired(
        tmp_path: Path, device: Path, node: Node) -> None:
    env = {"NOETL_STREAM_STORE_BYTES": STORE_BYTES}
    init = await run_cli("init", "--nats-url", node.url, env=env)
    assert init.returncode == 0, init.stderr
    procs = Processes(node.url, tmp_path, env=env)
    await procs.start("server", "server")
    await procs.start("worker", "worker")
    try:
        (tmp_path / "pb.yaml").write_text(PLAYBOOK)
        run_err = tmp_path / "run.err"
        with open(run_err, "wb") as err:
            run = await asyncio.create_subprocess_exec(
                str(CLI), "run", str(tmp_path / "pb.yaml"), "--json", "--quiet", "--nats-url",
                node.url, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
                stderr=err, env={**os.environ, **env})

        async def slow_running() -> str:
            listed = await run_cli("executions", "list", "--json", "--nats-url", node.url,
                                   env=env)
            rows = json.loads(listed.stdout or "[]")
            assert rows, "no execution yet"
            eid = str(rows[0]["execution_id"])
            report, _ = await status(node.url, eid, env)
            assert [r["step"] for r in report.get("running", [])] == ["slow"], report
            return eid

        eid = await assert_eventually(slow_running, timeout_s=60, interval_s=0.5)
        filler = fill(device)

        async def says_why() -> str:
            as_json = await run_cli("status", eid, "--json", "--nats-url", node.url, env=env)
            if as_json.returncode != 0:  # nats-server disabled JetStream as a whole
                assert as_json.returncode == 3, as_json.stderr
                assert "JetStream" in as_json.stderr, as_json.stderr
                return as_json.stderr
            report = json.loads(as_json.stdout)
            assert report["status"] == "running", report
            stuck = report.get("unapplied_events") or report.get("held_writes") or [
                r for r in report["running"] if r.get("command_stored") is False]
            assert stuck, report
            text = (await run_cli("status", eid, "--nats-url", node.url, env=env)).stdout
            assert any(said in text for said in (
                "wait in NOETL_ROUTER", "is not in NOETL_COMMANDS", "cannot store it")), text
            return text

        said = await assert_eventually(says_why, timeout_s=60, interval_s=0.5)
        assert "disk filled up" in said or "no space left on device" in said, said
        assert "no space left on device" in node.log.read_text()
        if "JetStream" in said:  # JetStream disabled: `run`, following the events, says so too
            def run_says_why() -> None:
                warned = run_err.read_text().partition("cannot follow the events")[2]
                assert "JetStream" in warned, run_err.read_text()

            await assert_eventually(run_says_why, timeout_s=90, interval_s=0.5)

        # Space back, then nats-server restarted on the same store: the execution finishes.
        filler.unlink()
        node.stop()
        await node.start()

        async def completed() -> dict[str, Any]:
            done, _ = await status(node.url, eid, env)
            assert done["status"] == "completed", done
            return done

        done = await assert_eventually(completed, timeout_s=90, interval_s=0.5)
        assert done["result"] == {"after": 10}
        out, _ = await asyncio.wait_for(run.communicate(), 120)
        assert run.returncode == 0, run_err.read_text()
        assert json.loads(out)["result"] == {"after": 10}
        bus = await connect(node.url, name="test-verify")
        try:
            assert differences(await verify_every_execution(bus)) is None
        finally:
            await bus.close()
    finally:
        await procs.stop_all()
