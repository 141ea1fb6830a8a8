"""NoETL forms that change what a step computes, run through the whole stack (real nats-server)."""

from __future__ import annotations

import pytest
from plain_client import PlainClient

from playbook_files import read_playbook

pytestmark = pytest.mark.integration


async def test_noop_result_and_message_are_the_steps_results(services: None,
                                                             client: PlainClient) -> None:
    feed = await client.run("noop-result-1", read_playbook("integration", "noetl_noop_result.yaml"))

    final = feed.final
    assert final["event_type"] == "execution.completed", final.get("error")
    assert final["steps"]["start"]["result"] == {"region": "eu", "ids": [1, 2]}
    assert final["steps"]["end"]["result"] == {"ids": [1, 2], "said": "ready in eu", "status": "ok"}
