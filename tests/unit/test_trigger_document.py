"""`kind: Trigger` documents: the typed model and errors with file, line and field."""

from __future__ import annotations

from pathlib import Path

import pytest

from noetl_stream.errors import PlaybookError
from noetl_stream.triggers.document import parse_trigger

HEADER = "apiVersion: noetl.io/v2\nkind: Trigger\nmetadata: {name: nightly}\n"


def test_a_cron_trigger() -> None:
    trigger = parse_trigger(HEADER + """spec:
  playbook: etl/nightly
  version: 3
  payload: {day: "{{ trigger.nominal_time[:10] }}"}
  schedule: {cron: "0 2 * * *", timezone: Europe/Amsterdam}
""")
    assert trigger.name == "nightly"
    assert trigger.spec.version == "3"
    assert trigger.spec.source == "schedule"
    assert trigger.spec.schedule is not None
    assert trigger.spec.schedule.nats_schedule() == "0 0 2 * * *"


def test_an_interval_and_a_subject() -> None:
    every = parse_trigger(HEADER + "spec: {playbook: a, schedule: {every: 5m}}\n")
    assert every.spec.schedule is not None
    assert every.spec.schedule.nats_schedule() == "@every 300s"
    on = parse_trigger(HEADER + 'spec: {playbook: a, on: {subject: "orders.*.created", '
                                'when: "{{ message.data.total > 100 }}"}}\n')
    assert on.spec.on is not None and on.spec.on.subject == "orders.*.created"


def _issues(text: str) -> list[str]:
    with pytest.raises(PlaybookError) as err:
        parse_trigger(text, "t.yaml")
    return [str(i) for i in err.value.issues]


def test_every_problem_is_reported_with_its_line_and_field() -> None:
    issues = _issues(HEADER + """spec:
  playbok: etl/nightly
  schedule:
    cron: "0 2 * *"
    timezone: Mars/Base
""")
    assert 't.yaml:5: field "spec.playbok": unknown key \'playbok\'; did you mean "playbook"?' \
        in issues
    assert any(i.startswith('t.yaml:7: field "spec.schedule.cron"') for i in issues)
    assert any(i.startswith('t.yaml:8: field "spec.schedule.timezone": unknown time zone')
               for i in issues)


@pytest.mark.parametrize(("spec", "field"), [
    ("{playbook: a}", '"spec"'),
    ("{playbook: a, schedule: {every: 5m}, on: {subject: x}}", '"spec"'),
    ("{playbook: a, schedule: {every: 5m, timezone: UTC}}", '"spec.schedule.timezone"'),
    ("{playbook: a, schedule: {cron: '* * * * *', every: 1s}}", '"spec.schedule"'),
    ("{playbook: a, on: {subject: 'a.>.b'}}", '"spec.on.subject"'),
    ("{playbook: a, on: {subject: a, when: '{{ x >'}}", '"spec.on.when"'),
    ("{playbook: a, payload: [1], on: {subject: a}}", '"spec.payload"'),
])
def test_bad_specs(spec: str, field: str) -> None:
    issues = _issues(HEADER + f"spec: {spec}\n")
    assert any(f"field {field}" in i for i in issues), issues


def test_header_and_name() -> None:
    issues = _issues("apiVersion: noetl.io/v1\nkind: Playbook\nmetadata: {name: 'a b'}\n"
                     "spec: {playbook: a, schedule: {every: 1s}}\n")
    assert [i.split(": field ")[1].split(":")[0] for i in issues] == [
        '"apiVersion"', '"kind"', '"metadata.name"']


TRIGGER_EXAMPLES = sorted(p for p in (Path(__file__).resolve().parents[2] / "playbooks").rglob(
    "*.yaml") if "\nkind: Trigger" in "\n" + p.read_text())


@pytest.mark.parametrize("path", TRIGGER_EXAMPLES, ids=lambda p: p.name)
def test_every_trigger_example_parses(path: Path) -> None:
    trigger = parse_trigger(path.read_text(), str(path))
    assert trigger.spec.playbook


def test_the_examples_hold_trigger_documents() -> None:
    assert len(TRIGGER_EXAMPLES) >= 3
