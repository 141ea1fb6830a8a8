"""How `run`'s progress lines and `status` show a cursor loop, which has no total: its claiming
slots, the items done, and the claims that found nothing left."""

from __future__ import annotations

import io

from unit_helpers import parse

from noetl_stream.cli.progress import ProgressPrinter
from noetl_stream.cli.status_cmd import human_lines
from noetl_stream.router.explain import explain
from noetl_stream.testing import Reply, RouterHarness

PLAYBOOK = parse("""
    workflow:
      - step: drain
        loop:
          cursor: {auth: pg, claim: "DELETE FROM q WHERE id = (SELECT min(id) FROM q) RETURNING id"}
          iterator: job
          spec: {max_in_flight: 2}
        tool: {kind: noop}
""")


def test_progress_shows_claiming_slots_items_done_and_empty_claims() -> None:
    harness = RouterHarness(PLAYBOOK)
    first, second = harness.pending_for("drain")
    harness.answer(first, Reply(result=1))
    harness.answer(second, Reply(exhausted=True))
    out = io.StringIO()
    printer = ProgressPrinter(out, color=False)
    for message in harness.events:
        printer(message.body)
    lines = [line.split("s  ", 1)[1] for line in out.getvalue().splitlines()]
    assert "  drain: cursor loop, 2 claiming at once" in lines
    assert "  drain: 1 done" in lines
    assert "  drain: 1 done (a claim found nothing left)" in lines


def test_status_shows_done_in_flight_and_exhausted_slots() -> None:
    harness = RouterHarness(PLAYBOOK)
    harness.answer(harness.pending_for("drain")[0], Reply(exhausted=True))
    lines = human_lines(explain(harness.state, PLAYBOOK, harness.now))
    assert ("    iterations: 0 done, 1 in flight, 1 of 2 claiming slots found nothing left"
            in lines)
