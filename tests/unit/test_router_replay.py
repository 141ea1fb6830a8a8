"""Replay and version changes in the pure router: a replay starts at the step where its original
stopped (or a named one) with the original's results seeded and not run again, and names its
original; the original records its replays; a restart applied with another version of the
playbook switches the execution to it, unless that version lacks a step the execution ran."""

from __future__ import annotations

from test_router_restart import CHAIN, fail_four, restart
from unit_helpers import parse

from noetl_stream.router import apply, start_replay
from noetl_stream.router.replay import seed_of
from noetl_stream.router_events import router_event
from noetl_stream.testing.router_harness import Reply, RouterHarness


def failed_chain() -> RouterHarness:
    h = RouterHarness(CHAIN)
    h.run(fail_four)
    assert h.state.status == "failed"
    return h


def replay_of(original: RouterHarness, from_step: str | None = None) -> RouterHarness:
    """A harness driving the replay of `original` (its own start discarded)."""
    seed = seed_of(CHAIN, original.state, from_step)
    h = RouterHarness(CHAIN, execution_id="exec2", workload={"ok": True})
    h.pending.clear()
    h.commands.clear()
    h.events.clear()
    h.state = start_replay(CHAIN, seed, execution_id="exec2", playbook_key=CHAIN.name,
                           workload={"ok": True}, now=0.0)
    h._collect(h.state.outbox)
    return h


def test_a_replay_runs_from_where_the_original_stopped_with_its_results_seeded() -> None:
    original = failed_chain()
    seed = seed_of(CHAIN, original.state, None)
    assert seed["roots"] == ["four"]
    assert sorted(seed["steps"]) == ["start", "three", "two"]

    h = replay_of(original)
    h.run(fail_four)

    assert h.state.status == "completed", h.state.error
    assert [c["step_run_id"] for c in h.commands] == ["exec2.four.1", "exec2.five.1"]
    assert {n: (r.status, r.runs) for n, r in h.state.steps.items()} == {
        "start": ("completed", 0), "two": ("completed", 0), "three": ("completed", 0),
        "four": ("completed", 1), "five": ("completed", 1)}
    assert h.state.steps["three"].result == "three"
    assert h.state.replay_of == "exec1"
    (started,) = [m for m in h.events if m.event_type == "execution.started"]
    assert started.body["replay_of"] == "exec1"
    assert started.body["replay"]["roots"] == ["four"]


def test_a_replay_from_a_step_runs_it_and_everything_downstream() -> None:
    h = replay_of(failed_chain(), "two")
    h.run(fail_four)
    assert [c["step"] for c in h.commands] == ["two", "three", "four", "five"]
    assert h.state.steps["start"].runs == 0


def test_a_replay_from_a_step_the_playbook_lacks_is_refused() -> None:
    try:
        seed_of(CHAIN, failed_chain().state, "six")
    except ValueError as exc:
        assert str(exc) == 'the playbook has no step "six"'
    else:
        raise AssertionError("no error")


def test_the_original_lists_its_replays_once_each_whatever_its_status() -> None:
    h = failed_chain()
    for replay in ("exec2", "exec3", "exec2"):
        h.send({"event_type": "execution.replayed", "execution_id": "exec1",
                "replay_execution_id": replay})
    assert h.state.replays == ["exec2", "exec3"]
    assert h.state.status == "failed"


def test_a_restart_with_another_version_switches_the_execution_to_it() -> None:
    h = failed_chain()
    first = len(h.commands)
    longer = parse(CHAIN_TEXT + "        next: six\n      - step: six\n        tool: {kind: noop}\n")
    h.playbook = longer  # the server applies the restart, and what follows, with that version
    outbox = restart(h, playbook_key="v2", workload={"ok": True})
    h.run(fail_four)
    assert h.state.status == "completed", h.state.error
    assert [c["step"] for c in h.commands[first:]] == ["four", "five", "six"]
    assert h.state.playbook_key == "v2"
    (restarted,) = [m for m in outbox if m.event_type == "execution.restarted"]
    assert (restarted.body["playbook_key"], restarted.body["previous_playbook_key"]) == (
        "v2", CHAIN.name)


def test_a_version_that_lacks_a_step_the_execution_ran_is_refused() -> None:
    h = failed_chain()
    renamed = parse(CHAIN_TEXT.replace("three", "third"))
    state = apply(renamed, h.state, router_event({"event_type": "execution.restart.requested",
                                                  "execution_id": "exec1", "restart": 1,
                                                  "playbook_key": "v3"}), 10.0).state
    assert state.status == "failed" and state.playbook_key == CHAIN.name
    (ignored,) = state.outbox
    assert ignored.body["reason"] == 'the playbook has no step "three" of the execution'


CHAIN_TEXT = """
    workload: {ok: false}
    workflow:
      - step: start
        tool: {kind: noop}
        next: two
      - step: two
        tool: {kind: noop}
        next: three
      - step: three
        tool: {kind: noop}
        next: four
      - step: four
        tool: {kind: python, input: {ok: "{{ workload.ok }}"}, code: "result = ok"}
        next: five
      - step: five
        tool: {kind: noop}
"""


READS_EARLIER = parse("""
    workflow:
      - step: start
        tool: {kind: python, code: "result = {'greeting': 'hi'}"}
        next: shout
      - step: shout
        tool: {kind: python, input: {text: "{{ start.greeting }}"}, code: "result = text"}
""")


def test_a_replayed_step_reads_the_results_seeded_from_the_original() -> None:
    original = RouterHarness(READS_EARLIER)
    original.run(lambda c: Reply(result={"greeting": "hi"} if c["step"] == "start" else "HI"))
    assert original.state.status == "completed"

    seed = seed_of(READS_EARLIER, original.state, "shout")
    h = RouterHarness(READS_EARLIER, execution_id="exec2")
    h.pending.clear()
    h.commands.clear()
    h.state = start_replay(READS_EARLIER, seed, execution_id="exec2", playbook_key="p",
                           workload={}, now=0.0)
    h._collect(h.state.outbox)
    h.run(lambda c: Reply(result=c["context"]["steps"]["start"]["greeting"].upper()))

    assert h.state.status == "completed", h.state.error
    assert [c["step"] for c in h.commands] == ["shout"]
    assert h.commands[0]["context"]["steps"]["start"] == {"greeting": "hi"}
    assert h.state.steps["shout"].result == "HI"
