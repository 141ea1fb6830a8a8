"""A `next` list of `{step, when}` targets: the first that matches wins (NoETL's server), unless the
step's `spec.next_mode` says inclusive; a list without guards fires every entry (spec 004 §9.1).
"""

from __future__ import annotations

import pytest
from unit_helpers import parse

from noetl_stream.testing import Reply, RouterHarness

GUARDED = """
    workflow:
      - step: start
        SPEC
        next:
          - step: small
            when: "{{ result.n < 10 }}"
            args: {why: small}
          - step: even
            when: "{{ result.n % 2 == 0 }}"
          - step: other
      - step: small
      - step: even
      - step: other
"""


def harness_of(text: str, spec: str = "") -> RouterHarness:
    return RouterHarness(parse(text.replace("SPEC", spec)))


@pytest.mark.parametrize(("n", "fired"), [(4, "small"), (12, "even"), (11, "other")])
def test_the_first_matching_target_wins_and_an_unguarded_one_is_the_fallback(
        n: int, fired: str) -> None:
    harness = harness_of(GUARDED)
    harness.run(lambda c: Reply(result={"n": n}))
    assert harness.fired_steps() == ["start", fired]
    assert harness.state.status == "completed"
    assert {name: rec.status for name, rec in harness.state.steps.items() if name != "start"} \
        == {name: "completed" if name == fired else "skipped" for name in ("small", "even", "other")}


def test_spec_next_mode_inclusive_starts_every_matching_target() -> None:
    harness = harness_of(GUARDED, "spec: {next_mode: inclusive}")
    harness.run(lambda c: Reply(result={"n": 4}))
    assert harness.fired_steps() == ["start", "small", "even", "other"]


def test_targets_without_guards_all_start() -> None:
    harness = RouterHarness(parse("""
        workflow:
          - step: start
            next:
              - step: a
                args: {page: 1}
              - step: b
          - step: a
          - step: b
    """))
    harness.run(lambda c: Reply(result={}))
    assert sorted(harness.fired_steps()) == ["a", "b", "start"]
