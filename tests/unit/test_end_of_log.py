"""Which end event of a log is the execution's end (bus/watcher.py `EndOfLog`): the last one,
once the reader has caught up; an `execution.restarted` after an end reopens the execution."""

from __future__ import annotations

from noetl_stream.bus.watcher import EndOfLog


def test_an_end_followed_by_a_restart_is_not_the_end() -> None:
    end = EndOfLog()
    failed = {"event_type": "execution.failed"}
    completed = {"event_type": "execution.completed", "restart": 1}

    assert end.see({"event_type": "step.failed"}, 3) is None
    assert end.see(failed, 2) is None  # more to come: it may be reopened
    assert end.see({"event_type": "execution.restarted"}, 1) is None
    assert end.see(completed, 0) is completed


def test_an_end_is_the_end_once_the_reader_has_caught_up() -> None:
    end = EndOfLog()
    failed = {"event_type": "execution.failed"}

    assert end.see(failed, 1) is None
    assert end.see({"event_type": "task.started"}, 0) is failed  # a late progress event
    assert EndOfLog().see(failed, None) is failed  # not a JetStream delivery: nothing to wait for


def test_a_restart_asked_for_after_the_end_holds_it_until_applied_or_refused() -> None:
    end = EndOfLog()
    failed = {"event_type": "execution.failed"}
    asked = {"event_type": "execution.restart.requested"}

    end.see(failed, 1)
    assert end.see(asked, 0) is None  # caught up, but the router has not answered yet
    refused = {"event_type": "event.ignored", "ignored": "execution.restart.requested"}
    assert end.see(refused, 0) is failed
