"""An outcome nats-server does not answer is published again under its msg id, and the step's
tools do not run again.

A nats-server whose disk filled up answers no write to the stream it was writing then (the
events stream, say) until it is restarted: the worker's publish of an outcome times out. A
worker that handed the command back for it ran the step's tools again at each delivery. The
unanswered write is made here deterministically: the shipped accounts config, with the worker's
outcome subject denied (nats-server answers a denied publish with nothing, as a store that no
longer writes), and allowed again by a config reload (SIGHUP) after the publish timed out.
"""

from __future__ import annotations

import asyncio
import logging
import re
import signal
from pathlib import Path

import pytest
from nats.errors import TimeoutError as NatsTimeoutError
from test_nats_accounts import ACCOUNTS_CONF, ENV, PASSWORDS, _listening

from local_http import HttpService
from noetl_stream.bus.connection import Bus, connect
from noetl_stream.bus.nats_server import free_port
from noetl_stream.bus.provision import provision
from noetl_stream.bus.stored_publish import JETSTREAM_TIMEOUT_S, StoredPublisher
from noetl_stream.services import run_services, submit_and_watch
from noetl_stream.testing.cluster import render_node_config, start_node, stop_node
from noetl_stream.testing.waiting import assert_eventually

pytestmark = pytest.mark.integration

OUTCOME = '"noetl.events.*.step.done.default"'
PLAYBOOK = """\
apiVersion: noetl.io/v2
kind: Playbook
metadata:
  name: unanswered_outcome
workflow:
  - step: start
    tool:
      kind: http
      method: GET
      url: "{url}/slow?s=0&key=once"
"""


def _config(port: int, monitor: int, tmp_path: Path, *, outcome_allowed: bool) -> str:
    text = re.sub(r"(?m)^listen:\s*\S+", f"listen: 127.0.0.1:{port}", ACCOUNTS_CONF.read_text())
    if not outcome_allowed:
        assert text.count(OUTCOME) == 1
        text = text.replace(OUTCOME, '"noetl.events.*.step.done.not-yet"')
    return render_node_config(text, ports={8222: monitor}, store_dir=tmp_path / "js")


async def test_an_unanswered_outcome_is_published_again_and_its_tools_run_once(
        tmp_path: Path, http_service: HttpService, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="noetl_stream.storage")
    port, monitor = free_port(), free_port()
    conf = tmp_path / "accounts.conf"
    conf.write_text(_config(port, monitor, tmp_path, outcome_allowed=False))
    log = tmp_path / "nats-server.log"
    process = start_node(conf, log, env=ENV)
    buses: list[Bus] = []
    try:
        await assert_eventually(lambda: _listening(process, port, log))

        async def as_user(user: str) -> Bus:
            bus = await connect(f"nats://{user}:{PASSWORDS[user]}@127.0.0.1:{port}",
                                name=f"test-{user}")
            buses.append(bus)
            return bus

        server, worker, client = (await as_user("server"), await as_user("worker-default"),
                                  await as_user("client"))
        await provision(server)
        # What a log says of an unanswered write names it.
        with pytest.raises(NatsTimeoutError) as unanswered:
            await StoredPublisher(worker.nc, timeout_s=0.5).publish(
                "noetl.events.1.step.done.default", b"{}")
        assert "JetStream answered no write to noetl.events.1.step.done.default within 0.5 s" \
            in str(unanswered.value)
        async with run_services(server, worker=False), \
                run_services(worker, server=False, python_children=1):
            final = asyncio.create_task(submit_and_watch(
                client, playbook_text=PLAYBOOK.format(url=http_service.url),
                playbook_file="unanswered.yaml", payload={}, on_event=lambda _: None,
                timeout_s=120))
            # The call is made; its outcome's publish goes unanswered until it times out.
            await assert_eventually(lambda: http_service.calls["slow:once"] == 1, timeout_s=30)
            await asyncio.sleep(JETSTREAM_TIMEOUT_S + 2)
            assert not final.done()
            conf.write_text(_config(port, monitor, tmp_path, outcome_allowed=True))
            process.send_signal(signal.SIGHUP)
            done = await asyncio.wait_for(final, 90)
    finally:
        for bus in buses:
            await bus.close()
        stop_node(process)
    assert done["event_type"] == "execution.completed", done
    assert http_service.calls["slow:once"] == 1, "the step's tools ran again"
    assert any("JetStream answered no write" in r.getMessage() for r in caplog.records)
