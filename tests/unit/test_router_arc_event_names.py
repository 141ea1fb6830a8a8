"""The event name an arc's guard reads: after a plain step, NoETL's Python engine names it by the
call (`call.done` / `call.error`) and spec 003 by the step (`step.done` / `step.failed`); both
hold. A loop step's arcs see `loop.done` only."""

from __future__ import annotations

from unit_helpers import parse

from noetl_stream.dsl import templating
from noetl_stream.dsl.values import EventName
from noetl_stream.testing import Reply, RouterHarness

CALL_NAMES = """
    workflow:
      - step: start
        tool: {kind: python, code: "result = {'n': 1}"}
        next:
          spec: {mode: exclusive}
          arcs:
            - step: done_by_call
              when: "{{ event.name == 'call.done' }}"
            - step: failed_by_call
              when: "{{ event.name == 'call.error' }}"
      - step: done_by_call
        tool: {kind: python, code: "result = 1"}
        next:
          - step: done_by_step
            when: "{{ event.name == 'step.done' and event.name != 'call.error' }}"
      - step: done_by_step
      - step: failed_by_call
"""

LOOP = """
    workflow:
      - step: start
        loop: {in: "{{ [1, 2] }}", iterator: x}
        tool: {kind: python, code: "result = x"}
        next:
          spec: {mode: exclusive}
          arcs:
            - step: per_call
              when: "{{ event.name == 'call.done' }}"
            - step: after_loop
              when: "{{ event.name == 'loop.done' }}"
      - step: per_call
      - step: after_loop
"""


def test_a_plain_step_routes_on_call_done_and_on_step_done_a_loop_step_on_loop_done() -> None:
    harness = RouterHarness(parse(CALL_NAMES))
    harness.run(lambda c: Reply(result={"n": 1}))
    assert harness.fired_steps() == ["start", "done_by_call", "done_by_step"]
    assert harness.state.status == "completed"
    looped = RouterHarness(parse(LOOP))
    looped.run(lambda c: Reply(result=1))
    assert looped.fired_steps() == ["start", "after_loop"]


def test_a_failed_plain_step_routes_on_call_error() -> None:
    harness = RouterHarness(parse(CALL_NAMES))
    harness.run(lambda c: Reply(ok=False, error={"kind": "python", "message": "boom"})
                if c["step"] == "start" else Reply())
    assert harness.fired_steps() == ["start", "failed_by_call"]
    assert harness.state.status == "completed"


def test_an_event_name_prints_and_serialises_as_itself() -> None:
    name = EventName("step.done", ("call.done",))
    assert templating.render_string("{{ n }}|{{ n in ['call.done'] }}", {"n": name}) == \
        "step.done|True"
    assert name != "step.failed" and name == "step.done" and str(name) == "step.done"
