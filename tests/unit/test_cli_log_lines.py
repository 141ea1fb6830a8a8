"""The lines `noetl-stream logs` and `status` print: a timer's schedule, whose `timestamp` is
when the timer fires, is dated by when it was set and says when it fires."""

from __future__ import annotations

from noetl_stream.cli.execution_log import event_lines


def test_a_timer_schedule_is_dated_by_when_it_was_set_and_says_when_it_fires() -> None:
    set_at, fire_at = 1795762864.4794817, 1795766464.4794817  # an hour apart
    event = {"event_type": "timer.scheduled", "execution_id": "1", "step": "wait_for_approval",
             "timestamp": fire_at, "time": "2026-11-27T08:01:04.479482Z", "timer_id": "timeout",
             "fire_at": fire_at, "set_at": set_at}

    assert event_lines(event) == [
        "2026-11-27T07:01:04.479482Z  timer.scheduled  wait_for_approval  "
        "timer timeout fires at 2026-11-27T08:01:04.479482Z"]


def test_other_events_keep_their_own_time() -> None:
    event = {"event_type": "step.started", "execution_id": "1", "step": "start",
             "timestamp": 1795762864.45, "time": "2026-11-27T07:01:04.450000Z"}

    assert event_lines(event) == ["2026-11-27T07:01:04.450000Z  step.started  start"]


def test_status_counts_one_event_in_the_singular() -> None:
    from noetl_stream.cli.status_cmd import human_lines

    report = {"execution_id": "1", "status": "completed", "playbook": "p", "started_at": None,
              "events_applied": 1}
    assert human_lines(report)[1].endswith(", 1 event applied")
    assert human_lines({**report, "events_applied": 2})[1].endswith(", 2 events applied")
