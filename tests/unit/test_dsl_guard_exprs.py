"""The guards the spec 001 dialect composes render to the template text the IR has always held."""

from __future__ import annotations

from noetl_stream.dsl.guard_exprs import (
    CALL_OK,
    STEP_NOT_FAILED,
    And,
    Compare,
    Concat,
    Const,
    Group,
    IfElse,
    ListOf,
    Name,
    Source,
    template,
)
from noetl_stream.dsl.templating import enclosed_expression, evaluate_guard, render


def test_templated_target_guard_keeps_the_authors_expression_in_parentheses() -> None:
    guard = template(And((STEP_NOT_FAILED, Compare(Group(Source("'a' if x else 'b'")), "==",
                                                   Const("a")))))
    assert guard == "{{ event.name != 'step.failed' and ('a' if x else 'b') == 'a' }}"
    context = {"event": {"name": "step.done"}, "x": True}
    assert evaluate_guard(guard, context) is True
    assert evaluate_guard(guard, {**context, "event": {"name": "step.failed"}}) is False


def test_inclusive_case_locals_and_matched_list() -> None:
    flag = template(IfElse(Const(True), Group(Source("n > 1")), Const(False)))
    assert flag == "{{ true if (n > 1) else false }}"
    matched = template(Concat((ListOf((Const("case_0"),)), Group(
        IfElse(ListOf((Const("case_1"),)), Name("_case_1"), ListOf())))))
    assert matched == "{{ ['case_0'] + (['case_1'] if _case_1 else []) }}"
    assert render(matched, {"_case_1": True}) == ["case_0", "case_1"]
    assert render(matched, {"_case_1": False}) == ["case_0"]


def test_call_ok_guards() -> None:
    assert template(CALL_OK) == "{{ outcome.status == 'ok' }}"
    assert template(And((CALL_OK, Name("_case_2")))) == "{{ outcome.status == 'ok' and _case_2 }}"


def test_enclosed_expression_is_the_text_between_the_outer_braces() -> None:
    assert enclosed_expression("  {{ a.b }} ") == " a.b "
    assert enclosed_expression("a.b") is None
    assert enclosed_expression("{{ a }} and {{ b }}") == " a }} and {{ b "
