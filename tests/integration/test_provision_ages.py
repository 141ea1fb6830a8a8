"""Upgrading a store provisioned by an earlier version: provisioning removes the max age it gave
the streams that hold work and history and the results object store, which would otherwise age
out what running executions still need."""

from __future__ import annotations

import pytest

from noetl_stream.bus.connection import Bus
from noetl_stream.bus.provision import provision

pytestmark = pytest.mark.integration

AGED = ("NOETL_EVENTS", "NOETL_COMMANDS", "NOETL_REQUESTS", "NOETL_ROUTER", "OBJ_noetl_results")


async def test_provisioning_removes_the_age_limits_of_earlier_versions(bus: Bus) -> None:
    for stream in AGED:
        info = await bus.js.stream_info(stream)
        info.config.max_age = 604800.0
        await bus.js.update_stream(info.config)
    report = await provision(bus)
    for stream in AGED:
        assert (await bus.js.stream_info(stream)).config.max_age in (0, None), stream
    assert any("NOETL_EVENTS" in line for line in report.updated)
    assert any("noetl_results" in line for line in report.updated)
    again = await provision(bus)
    assert again.updated == [] and again.drift == []
