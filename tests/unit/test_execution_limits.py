"""The execution-wide knobs of `executor.spec` in the pure parts: validation (file, line, field),
the router's admission (an execution under a concurrency limit waits for `execution.admitted`),
its deadlines (`timeout` fails it with kind `timeout`, `sla` emits `sla.missed` once), and the
decisions on a concurrency group's record."""

from __future__ import annotations

from typing import Any

import pytest
from unit_helpers import parse, playbook_text

from noetl_stream.cli.status_cmd import human_lines
from noetl_stream.dsl import parse_playbook
from noetl_stream.errors import PlaybookError
from noetl_stream.router import apply, start
from noetl_stream.router.explain import explain
from noetl_stream.router.state import Outgoing
from noetl_stream.router_events import router_event
from noetl_stream.server.replay import rebuild
from noetl_stream.server.state_diff import content, first_difference
from noetl_stream.state import concurrency_groups as groups
from noetl_stream.subjects import load_topology
from noetl_stream.testing.router_harness import Reply, RouterHarness
from noetl_stream.triggers.document import parse_trigger

FILE = "test.yaml"

LIMITED = parse("""
    workload: {customer: acme}
    executor:
      spec:
        concurrency: {limit: 2, key: "{{ workload.customer }}", on_limit: queue}
        timeout: 90s
        sla: {max_duration: 1m}
    workflow:
      - step: start
        tool: {kind: python, code: "result = 1"}
        next: second
      - step: second
        loop: {in: [1, 2, 3], iterator: n, spec: {mode: parallel, max_in_flight: 2}}
        tool: {kind: python, code: "result = n"}
""")


def admitted(harness: RouterHarness) -> None:
    harness.send({"event_type": "execution.admitted", "execution_id": harness.state.execution_id})


def test_an_execution_under_a_limit_waits_for_its_slot_and_then_runs() -> None:
    harness = RouterHarness(LIMITED, now=100.0)
    assert harness.state.status == "running"
    assert harness.commands == []  # nothing runs before the slot
    (requested,) = harness.events_of("concurrency.requested")
    assert (requested["group"], requested["key"], requested["limit"], requested["on_limit"]) == \
        ("test[acme]", "acme", 2, "queue")
    (started,) = harness.events_of("execution.started")
    assert started["concurrency"]["group"] == "test[acme]"
    # The SLA counts from the request; the timeout only once admitted.
    assert [t.body["timer_id"] for t in harness.timers()] == ["watchdog.execution.sla"]
    assert harness.timers()[0].body["fire_at"] == 160.0

    admitted(harness)  # at 101
    assert [c["step"] for c in harness.commands] == ["start"]
    timeout = harness.timers()[-1].body
    assert (timeout["timer_id"], timeout["fire_at"]) == ("watchdog.execution.timeout", 191.0)
    admitted(harness)  # a copy: the start step does not fire twice
    assert [c["step"] for c in harness.commands] == ["start"]
    harness.run()
    assert harness.state.status == "completed"
    (released,) = harness.events_of("concurrency.released")
    assert (released["group"], released["status"]) == ("test[acme]", "completed")


def test_a_waiting_execution_cancelled_gives_up_its_place() -> None:
    harness = RouterHarness(LIMITED)
    harness.send({"event_type": "execution.cancel.requested",
                  "execution_id": harness.state.execution_id, "reason": "not needed"})
    assert harness.state.status == "cancelled"
    assert [e["status"] for e in harness.events_of("concurrency.released")] == ["cancelled"]
    admitted(harness)  # too late: nothing starts
    assert harness.commands == []


def test_the_execution_timeout_fails_it_and_withdraws_every_command_in_flight() -> None:
    harness = RouterHarness(LIMITED, now=0.0)
    admitted(harness)
    harness.answer(harness.pending_for("start")[0])
    assert len(harness.pending_for("second")) == 2
    timer = next(t for t in harness.timers() if t.body["timer_id"] == "watchdog.execution.timeout")
    harness.fire_timer(timer)
    state = harness.state
    assert state.status == "failed"
    assert state.error is not None and state.error["kind"] == "timeout"
    assert "ran longer than its timeout of 90s (executor.spec.timeout)" in state.error["message"]
    assert sorted(e["iteration"] for e in harness.events_of("step.timeout")) == [0, 1]
    assert state.steps["second"].status == "failed"
    assert harness.event_types()[-2:] == ["execution.failed", "concurrency.released"]


def test_sla_missed_is_emitted_once_and_the_execution_goes_on() -> None:
    harness = RouterHarness(LIMITED, now=10.0)
    admitted(harness)
    sla = harness.timers()[0]
    harness.now = 75.0
    harness.fire_timer(sla)
    harness.fire_timer(sla)  # redelivered
    (missed,) = harness.events_of("sla.missed")
    assert missed["playbook"] == "test"
    assert missed["max_duration_s"] == 60.0
    assert missed["elapsed_s"] == 66.0  # applied at 76 (the harness adds 1 s per event)
    assert harness.state.status == "running"
    harness.run()
    assert harness.state.status == "completed"


def test_a_deadline_timer_after_the_end_changes_nothing() -> None:
    harness = RouterHarness(LIMITED)
    admitted(harness)
    harness.run()
    assert harness.state.status == "completed"
    for timer in harness.timers():
        decision = apply(LIMITED, harness.state, router_event(timer.body), 999.0)
        assert decision.outbox == []
    assert harness.state.status == "completed" and harness.state.error is None
    assert not harness.state.sla_missed


def test_without_a_limit_the_start_step_fires_at_once_and_no_slot_is_asked() -> None:
    pb = parse("""
        executor: {spec: {timeout: 5}}
        workflow:
          - step: start
            tool: {kind: python, code: "result = 1"}
    """)
    harness = RouterHarness(pb)
    assert [c["step"] for c in harness.commands] == ["start"]
    assert "concurrency.requested" not in harness.event_types()
    assert [t.body["timer_id"] for t in harness.timers()] == ["watchdog.execution.timeout"]
    harness.run()
    assert "concurrency.released" not in harness.event_types()


@pytest.mark.parametrize(("executor", "expected"), [
    ("  spec:\n    concurrency: {limit: 0}\n",
     'test.yaml:7: field "executor.spec.concurrency.limit": limit must be a whole number of at '
     "least 1, got 0"),
    ("  spec:\n    concurrency: {limit: 1, on_limit: skipp}\n",
     'test.yaml:7: field "executor.spec.concurrency.on_limit": on_limit is one of queue, skip, '
     "cancel_oldest, got 'skipp'; did you mean \"skip\"?"),
    ("  spec:\n    concurrency:\n      limit: 1\n      keys: x\n",
     'test.yaml:9: field "executor.spec.concurrency.keys": unknown key \'keys\'; did you mean '
     '"key"?'),
    ("  spec:\n    concurrency: {limit: 1, key: \"{{ workload.a \"}\n",
     'test.yaml:7: field "executor.spec.concurrency.key": key is a template string naming the '
     "group: "),
    ("  spec:\n    timeout: soon\n",
     'test.yaml:7: field "executor.spec.timeout": the execution\'s timeout must be a positive '
     "number of seconds or a duration (30s, 5m, 1h), got 'soon'"),
    ("  spec:\n    sla: {max_duration: -5}\n",
     'test.yaml:7: field "executor.spec.sla.max_duration": max_duration must be a positive number '
     "of seconds or a duration (30s, 5m, 1h), got -5"),
])
def test_validate_names_file_line_and_field_of_a_bad_execution_knob(executor: str,
                                                                     expected: str) -> None:
    text = playbook_text("executor:\n" + executor + """workflow:
  - step: start
    tool: {kind: noop}
""")
    with pytest.raises(PlaybookError) as info:
        parse_playbook(text, FILE)
    assert str(info.value.issues[0]).startswith(expected), info.value.issues


# -- a group's record ------------------------------------------------------------------------
def test_a_group_admits_up_to_its_limit_then_queues_in_arrival_order() -> None:
    record = groups.GroupRecord(group="g")
    assert groups.join(record, "a", 2, "queue", 1.0).admitted == ["a"]
    assert groups.join(record, "b", 2, "queue", 2.0).admitted == ["b"]
    assert groups.join(record, "c", 2, "queue", 3.0).admitted == []
    assert groups.join(record, "d", 2, "queue", 4.0).admitted == []
    assert groups.join(record, "c", 2, "queue", 5.0).changed is False  # asked again
    assert groups.leave(record, "b", 6.0).admitted == ["c"]
    assert groups.leave(record, "d", 7.0).admitted == []  # gave up its place
    assert groups.leave(record, "a", 8.0).admitted == []
    assert [h.id for h in record.holders] == ["c"] and record.queue == []


def test_skip_refuses_without_changing_the_record() -> None:
    record = groups.GroupRecord(group="g")
    groups.join(record, "a", 1, "skip", 1.0)
    out = groups.join(record, "b", 1, "skip", 2.0)
    assert out.skipped and not out.changed and [h.id for h in record.holders] == ["a"]


def test_cancel_oldest_cancels_the_oldest_holder_and_the_newest_always_wins() -> None:
    record = groups.GroupRecord(group="g")
    groups.join(record, "a", 1, "cancel_oldest", 1.0)
    out_b = groups.join(record, "b", 1, "cancel_oldest", 2.0)
    assert list(out_b.cancels) == ["a"] and out_b.admitted == []
    assert groups.join(record, "b", 1, "cancel_oldest", 2.5).cancels == out_b.cancels  # again
    out_c = groups.join(record, "c", 1, "cancel_oldest", 3.0)
    assert list(out_c.cancels) == ["b"]  # b waited for a's slot: c takes its place
    assert groups.leave(record, "b", 4.0).admitted == []
    assert groups.leave(record, "a", 5.0).admitted == ["c"]


def test_a_triggers_concurrency_is_checked_with_file_line_and_field() -> None:
    text = ("apiVersion: noetl.io/v2\nkind: Trigger\nmetadata: {name: t}\nspec:\n"
            "  playbook: etl/x\n  on: {subject: a.b}\n  concurrency:\n    limit: 0\n"
            "    on_limit: later\n")
    with pytest.raises(PlaybookError) as info:
        parse_trigger(text, "t.yaml")
    assert [str(i) for i in info.value.issues] == [
        't.yaml:8: field "spec.concurrency.limit": limit must be a whole number of at least 1, '
        "got 0",
        't.yaml:9: field "spec.concurrency.on_limit": on_limit is one of queue, skip, '
        "cancel_oldest, got 'later'"]
    good = parse_trigger(text.replace("limit: 0", "limit: 2").replace("later", "skip"), "t.yaml")
    assert good.spec.concurrency is not None
    assert (good.spec.concurrency.limit, good.spec.concurrency.on_limit) == (2, "skip")


class LimitedRecorder(RouterHarness):
    """The log the events stream would hold for an execution of LIMITED."""

    def __init__(self) -> None:
        self.log: list[dict[str, Any]] = []
        super().__init__(LIMITED, now=1000.0)

    def _collect(self, outbox: list[Outgoing]) -> None:
        super()._collect(outbox)
        self.log += [{**m.body, "event_id": m.msg_id} for m in outbox if m.kind == "event"]

    def send(self, event: dict[str, Any]) -> list[Outgoing]:
        self.log.append({**event, "timestamp": self.now + 0.5})
        return super().send(event)


def test_verify_rebuilds_a_limited_execution_from_its_log() -> None:
    h = LimitedRecorder()
    admitted(h)
    h.run()
    sla = h.timers()[0]
    assert h.state.status == "completed"
    out = rebuild(LIMITED, h.log, load_topology(), playbook_key=h.state.playbook_key)
    assert out is not None
    assert first_difference(content(h.state), content(out.state)) is None
    assert out.state.admission is not None and out.state.admission["released"] is True
    assert sla.body["timer_id"] == "watchdog.execution.sla"


def test_a_requests_own_limit_that_cannot_hold_fails_the_start_with_the_reason() -> None:
    pb = parse("""
        workflow:
          - step: start
            tool: {kind: noop}
    """)
    with pytest.raises(ValueError, match=r"concurrency.limit: limit must be a whole number of at "
                                         r"least 1, got 0"):
        start(pb, execution_id="e1", playbook_key="k", workload={}, now=0.0,
              concurrency={"limit": 0})


def test_status_says_an_execution_waits_for_a_slot() -> None:
    harness = RouterHarness(LIMITED)
    lines = human_lines(explain(harness.state, LIMITED, 5.0))
    assert lines[2] == ("  waiting for a slot: at most 2 of test[acme] run at once "
                        "(on_limit: queue)")
    admitted(harness)
    assert not any("waiting for a slot" in line
                   for line in human_lines(explain(harness.state, LIMITED, 5.0)))


def test_an_execution_under_a_limit_is_not_restarted_in_place() -> None:
    harness = RouterHarness(LIMITED)
    admitted(harness)
    harness.run(lambda command: Reply(ok=False, error={"message": "boom"}))
    assert harness.state.status == "failed"
    harness.send({"event_type": "execution.restart.requested",
                  "execution_id": harness.state.execution_id, "restart": 1})
    assert harness.state.status == "failed"
    (ignored,) = harness.events_of("event.ignored")
    assert "not restarted in place" in ignored["reason"]


def test_the_playbooks_own_limit_wins_over_a_requests_and_a_request_limits_one_without() -> None:
    own = start(LIMITED, execution_id="e1", playbook_key="k", workload={"customer": "acme"},
                now=0.0, concurrency={"limit": 50, "on_limit": "skip"})
    assert own.admission is not None
    assert (own.admission["limit"], own.admission["on_limit"]) == (2, "queue")
    plain = parse("""
        workflow:
          - step: start
            tool: {kind: noop}
    """)
    lent = start(plain, execution_id="e2", playbook_key="k", workload={}, now=0.0,
                 concurrency={"limit": 1, "on_limit": "skip"})
    assert lent.admission is not None
    assert (lent.admission["group"], lent.admission["limit"], lent.admission["on_limit"]) == \
        ("test", 1, "skip")
