"""Static checks of what templates read (dsl/checks.py): typos found before anything runs, with
the line, the field and a did-you-mean; optional reads and valid playbooks never reported."""

from __future__ import annotations

from pathlib import Path

import pytest

from noetl_stream.dsl import parse_playbook
from noetl_stream.dsl.checks import missing_workload_keys
from noetl_stream.errors import PlaybookError

EXAMPLES = Path(__file__).resolve().parents[2] / "playbooks" / "examples"

TYPOS = """\
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: typos}
workload: {api: "http://x", rows: [1, 2]}
workflow:
  - step: start
    tool: {kind: http, url: "{{ workload.api_url }}/orders.json"}
    next: fetch_orders
  - step: fetch_orders
    tool: {kind: noop}
    next: each
  - step: each
    loop: {in: "{{ workload.rows }}", iterator: r}
    tool:
      kind: python
      input: {row: "{{ iter.row }}", o: "{{ fetch_order.data }}"}
      code: "result = row"
"""


def messages(text: str, strict: bool = False) -> list[str]:
    return [str(w) for w in parse_playbook(text, "p.yaml", strict=strict).warnings]


def test_typos_are_warnings_with_line_field_and_suggestion() -> None:
    assert messages(TYPOS) == [
        'p.yaml:7: step "start" field "tool.url": warning: reads workload.api_url, which the '
        'workload does not define; did you mean "api"?',
        'p.yaml:14: step "each" field "tool.input": warning: reads iter.row, which the loop does '
        'not set (its iterator is "r")',
        'p.yaml:14: step "each" field "tool.input": warning: reads "fetch_order", which is no '
        'step, workload key or ctx name; did you mean "fetch_orders"?',
    ]


def test_strict_makes_them_errors() -> None:
    with pytest.raises(PlaybookError) as caught:
        parse_playbook(TYPOS, "p.yaml", strict=True)
    assert [i.severity for i in caught.value.issues] == ["error"] * 3


def test_run_knows_the_merged_workload() -> None:
    playbook = parse_playbook(TYPOS, "p.yaml").playbook
    assert missing_workload_keys(playbook, {"api", "rows"}) == ["api_url"]
    assert missing_workload_keys(playbook, {"api", "rows", "api_url"}) == []


@pytest.mark.parametrize("template", [
    "{{ workload.region | default('eu') }}",
    "{{ workload.region | d('eu') }}",
    "{{ workload.region if workload.region is defined else 'eu' }}",
    "{{ workload.region or 'eu' }}",
    "{% if workload.region %}{{ workload.region }}{% endif %}",
    "{% for fetch_order in [1] %}{{ fetch_order }}{% endfor %}",
    "{% set fetch_order = 1 %}{{ fetch_order }}",
    "{{ start.data }}",
    "{{ some_unrelated_name }}",
])
def test_optional_and_valid_reads_are_not_reported(template: str) -> None:
    text = TYPOS.replace('"{{ workload.api_url }}/orders.json"', f'"{template}"')
    assert not [m for m in messages(text) if 'step "start"' in m]


def test_names_the_playbook_binds_are_not_reported() -> None:
    text = TYPOS.replace("next: fetch_orders", "next: [{step: fetch_orders, args: {fetch_order: 1}}]")
    assert not [m for m in messages(text) if '"fetch_order"' in m]


def test_an_iterator_written_by_set_iter_is_known() -> None:
    text = TYPOS.replace("iterator: r}", "iterator: row}")
    assert not [m for m in messages(text) if "iter.row" in m]


@pytest.mark.parametrize("path", sorted(p for p in EXAMPLES.rglob("*.yaml")
                                         if "\nkind: Trigger" not in "\n" + p.read_text()),
                         ids=lambda p: p.name)
def test_every_example_validates_clean_under_strict(path: Path) -> None:
    assert [str(w) for w in parse_playbook(path.read_text(), str(path), strict=True,
                                           base_dir=path.parent).warnings] == []
