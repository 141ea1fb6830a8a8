"""NoETL's locators of a result stored apart, on a real nats-server: a step result larger than
NoETL's worker keeps inline answers `{{ step._ref }}` (in a later step's input and in an arc's
`when`) with the KV entry that holds it; a small one has no `_ref`."""

from __future__ import annotations

import textwrap

import pytest

from noetl_stream import jsonutil
from noetl_stream.bus.connection import Bus
from noetl_stream.services import run_services, submit_and_watch
from noetl_stream.state.step_results import BUCKET

pytestmark = pytest.mark.integration

PLAYBOOK = textwrap.dedent("""\
    apiVersion: noetl.io/v2
    kind: Playbook
    metadata: {name: stored_apart}
    workflow:
      - step: start
        tool:
          kind: python
          code: |
            result = {"status": "ok", "items": [{"id": i, "pad": "A" * 250} for i in range(500)]}
        next: small
      - step: small
        tool: {kind: python, code: 'result = {"status": "ok", "n": 1}'}
        next:
          spec: {mode: exclusive}
          arcs:
            - step: check
              when: "{{ start._ref is defined and small._ref is not defined }}"
            - step: wrong
      - step: check
        tool:
          kind: noop
          input:
            has_ref: "{{ start._ref is defined }}"
            ref: "{{ start._ref }}"
            uri: "{{ start._uri }}"
            store: "{{ start._store }}"
            count: "{{ start['items'] | length }}"
            small_has_ref: "{{ small._ref is defined }}"
      - step: wrong
        tool: {kind: noop, input: {reached: wrong}}
    """)


async def test_a_large_result_answers_ref_with_the_entry_that_holds_it(bus: Bus) -> None:
    async with run_services(bus, python_children=1):
        final = await submit_and_watch(bus, playbook_text=PLAYBOOK, playbook_file="stored.yaml",
                                       payload={}, on_event=lambda _: None, timeout_s=60)
    assert final["status"] == "completed", final.get("error")
    result = final["result"]
    assert (result["has_ref"], result["store"], result["count"], result["small_has_ref"]) == (
        True, "kv", 500, False)
    assert result["uri"] == result["ref"]
    bucket, _, key = result["ref"].partition("/")
    assert bucket == BUCKET and key.startswith(f"{final['execution_id']}.")
    entry = await (await bus.js.key_value(BUCKET)).get(key)
    assert jsonutil.loads(entry.value or b"{}")["v"] == final["steps"]["start"]["result"]
