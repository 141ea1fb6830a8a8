"""`noetl-stream status` says which pool a waiting command was sent to."""

from __future__ import annotations

from unit_helpers import parse

from noetl_stream.router.explain import explain
from noetl_stream.testing import Reply, RouterHarness


def test_a_waiting_command_and_loop_name_their_pool() -> None:
    playbook = parse("""
        workflow:
          - step: start
            pool: gpu
            tool: {kind: noop}
            next: each
          - step: each
            loop: {in: "{{ [1, 2] }}", iterator: i}
            tool: {kind: noop}
    """)
    harness = RouterHarness(playbook)
    (waiting,) = explain(harness.state, playbook, now=0.0)["running"]
    assert waiting["pool"] == "gpu"
    assert waiting["waits_for"] == 'the outcome of its command in pool "gpu"'

    harness.run(lambda c: None if c["step"] == "each" else Reply())
    (looping,) = explain(harness.state, playbook, now=0.0)["running"]
    assert looping["waits_for"] == 'loop iterations in pool "default"'
