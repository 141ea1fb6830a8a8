"""The checks of a playbook's templates walk each distinct template text once (dsl/checks.py):
the parser's template and net checks and `run`'s check of the merged workload share one walk
per text, however many steps hold it. Counted in walks of Jinja's AST, not in time.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator

import pytest
from jinja2 import nodes

from noetl_stream.dsl import checks, parse_playbook, templating
from noetl_stream.dsl.checks import missing_workload_keys


def _chain(steps: int) -> str:
    """`steps` steps in a row, each reading the same workload key and a step's result."""
    lines = ["apiVersion: noetl.io/v2", "kind: Playbook", f"metadata: {{name: walks{steps}}}",
             "workload: {region: eu}", "workflow:"]
    for i in range(1, steps + 1):
        lines += [f"  - step: s{i}",
                  '    tool: {kind: noop, input: {where: "{{ workload.region }}", '
                  'last: "{{ s1.result | default(none) }}", size: "{{ workload.size }}"}}']
        if i < steps:
            lines.append(f"    next: {{arcs: [{{step: s{i + 1}}}]}}")
    return "\n".join(lines) + "\n"


@pytest.fixture
def walks(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Each `find_all` walk of a template's AST that dsl/checks.py makes, from a cold start."""
    seen: list[str] = []
    find_all = nodes.Node.find_all

    def counted(self: nodes.Node,
                node_type: type[nodes.Node] | tuple[type[nodes.Node], ...]) -> Iterator[nodes.Node]:
        if sys._getframe(1).f_code.co_filename == checks.__file__:
            seen.append(type(self).__name__)
        return find_all(self, node_type)

    checks._reads_of.cache_clear()
    templating.parse_template.cache_clear()
    monkeypatch.setattr(nodes.Node, "find_all", counted)
    yield seen
    checks._reads_of.cache_clear()


def _check_walks(steps: int, walks: list[str]) -> tuple[int, list[str]]:
    walks.clear()
    checks._reads_of.cache_clear()
    templating.parse_template.cache_clear()
    result = parse_playbook(_chain(steps), f"walks{steps}.yaml")
    missing = missing_workload_keys(result.playbook, {"region"})
    assert [w.field for w in result.warnings].count("tool.input") == steps  # workload.size
    return len(walks), missing


def test_the_checks_walk_each_template_text_once_however_many_steps_hold_it(
        walks: list[str]) -> None:
    one, missing_one = _check_walks(1, walks)
    many, missing_many = _check_walks(60, walks)

    assert one > 0
    assert many == one
    assert missing_one == missing_many == ["size"]


def test_the_workload_check_after_the_parse_walks_no_template_again(walks: list[str]) -> None:
    result = parse_playbook(_chain(30), "walks.yaml")
    walks.clear()

    assert missing_workload_keys(result.playbook, {"region", "size"}) == []
    assert missing_workload_keys(result.playbook, {"region"}) == ["size"]
    assert walks == []
