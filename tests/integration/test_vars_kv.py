"""`vars:` values land in KV `noetl_vars` as `<execution_id>.<name>` and stay readable downstream."""

from __future__ import annotations

import pytest

from noetl_stream import jsonutil
from noetl_stream.bus.connection import Bus
from noetl_stream.server.vars_store import VarsStore, changed, vars_key
from noetl_stream.services import submit_and_watch
from playbook_files import read_playbook

pytestmark = pytest.mark.integration

VARS = read_playbook("integration", "vars_kv_vars.yaml")


async def test_vars_are_written_to_kv_per_name_and_read_by_later_steps(bus: Bus, services: None) -> None:
    final = await submit_and_watch(bus, playbook_text=VARS, playbook_file="vars.yaml", payload={},
                                   on_event=lambda e: None, execution_id="vars1", timeout_s=30)

    assert final["status"] == "completed", final.get("error")
    assert final["result"] == 70
    assert final["vars"] == {"row_count": 70, "source": {"rows": 7, "table": "orders"}}
    kv = await bus.js.key_value("noetl_vars")
    entry = await kv.get("vars1.row_count")
    assert jsonutil.loads(entry.value) == 70
    # One put per change: 7 from `start`, then 70 from `use`.
    history = await kv.history("vars1.row_count")
    assert [jsonutil.loads(e.value) for e in history] == [7, 70]
    assert jsonutil.loads((await kv.get("vars1.source")).value) == {"rows": 7, "table": "orders"}
    assert await VarsStore(bus.js).read_vars("vars1") == final["vars"]
    assert await VarsStore(bus.js).read_vars("nothing-here") == {}


def test_only_new_or_changed_vars_are_written() -> None:
    assert changed({"a": 1, "b": [1]}, {"a": 1, "b": [1, 2], "c": None}) == {"b": [1, 2], "c": None}
    assert vars_key("x1", "row_count") == "x1.row_count"
    assert vars_key("x1", "has space") is None
    assert vars_key("x1", "a.b") is None
