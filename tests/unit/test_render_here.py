"""The allowance of a render in the server's own process: spending it signals the caller (past
every `except Exception` of the renderer) instead of failing the template, and it changes no
result: a render within it, or done again without it, renders the same."""

from __future__ import annotations

import pytest

from noetl_stream.dsl.template_budget import RenderElsewhere, rendering_here
from noetl_stream.dsl.templating import render_string
from noetl_stream.errors import TemplateError

ROWS = {"rows": [{"k": i % 7} for i in range(2_000)]}
HEAVY = "{% for i in range(100) %}{{ rows | groupby('k') | length }}{% endfor %}"


def test_a_render_past_the_allowance_is_handed_back_not_failed() -> None:
    with pytest.raises(RenderElsewhere):
        rendering_here(5_000, lambda: render_string(HEAVY, ROWS, step="s", field="set.x"))


def test_the_same_render_without_the_allowance_gives_the_result() -> None:
    # The digits spell a number past 64 bits: read as a float, as NoETL reads it.
    assert render_string(HEAVY, ROWS, step="s", field="set.x") == float("7" * 100)


def test_a_render_within_the_allowance_is_unchanged_by_it() -> None:
    light = "{{ rows | length }}"
    assert rendering_here(5_000, lambda: render_string(light, ROWS)) == \
        render_string(light, ROWS) == 2000


def test_the_allowance_covers_every_render_of_one_apply() -> None:
    def many() -> list[str]:
        return [render_string("{% for r in rows[:1000] %}{{ r.k }}{% endfor %}", ROWS)
                for _ in range(10)]

    assert len(many()) == 10  # each render alone is within the budget
    with pytest.raises(RenderElsewhere):
        rendering_here(5_000, many)


def test_the_budget_still_fails_the_template_where_the_whole_budget_runs() -> None:
    endless = "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}"
    with pytest.raises(TemplateError, match=r"budget|range"):
        render_string(endless, {}, step="s", field="set.x")
