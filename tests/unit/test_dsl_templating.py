"""Template rendering: native single expressions, text for mixed strings, JSON-style attribute reads."""

from __future__ import annotations

import logging
import time

import pytest

from noetl_stream.dsl import templating
from noetl_stream.dsl.templating import render_string
from noetl_stream.errors import TemplateError

CONTEXT = {
    "workload": {"items": [1, 2, 3], "n": 2, "name": "x"},
    "x": {"items": ["a", "b"], "keys": "k"},
    "flag": False,
    "text": "False",
}


def test_single_expression_renders_a_native_list() -> None:
    assert templating.render_string("{{ workload.items }}", CONTEXT) == [1, 2, 3]


def test_single_expression_renders_a_native_int_and_bool() -> None:
    assert templating.render_string("{{ workload.n + 1 }}", CONTEXT) == 3
    assert templating.render_string("  {{ flag }}  ", CONTEXT) is False


def test_mixed_string_renders_text() -> None:
    assert templating.render_string("n={{ workload.n }}", CONTEXT) == "n=2"
    assert templating.render_string("{{ workload.n }}-{{ workload.n }}", CONTEXT) == "2-2"


def test_text_of_several_parts_that_spells_a_value_is_that_value_as_in_noetl() -> None:
    # NoETL's server (render_to_value), Rust tools (render_value) and Python engine
    # (render_template) all read such text back as the value it spells.
    ctx = {"a": 1, "b": 2, "s": "42", "t": "True", "name": "x"}
    assert templating.render_string("[{{ a }}, {{ b }}]", ctx) == [1, 2]
    assert templating.render_string('{"k": {{ a }}, "n": "{{ name }}"}', ctx) == {"k": 1, "n": "x"}
    assert templating.render_string("{{ a }}{{ b }}", ctx) == 12
    assert templating.render_string(" {{ a }}.5", ctx) == 1.5
    assert templating.render_string("{{ t }}{{ '' }}", ctx) is True
    assert templating.render_string("{{ 'nu' }}ll", ctx) is None
    assert templating.render_string("{{ a }}, {{ b }}", ctx) == "1, 2"
    assert templating.render_string("[{{ a }}, oops]", ctx) == "[1, oops]"
    assert templating.render_data({"ids": "[{% for i in range(3) %}{{ i }}{{ ',' if not loop.last }}"
                                           "{% endfor %}]"}, {}) == {"ids": [0, 1, 2]}


def test_string_without_template_is_returned_as_is() -> None:
    assert templating.render_string("plain {text}", CONTEXT) == "plain {text}"


def test_attribute_read_on_a_mapping_reads_the_key_before_the_method() -> None:
    assert templating.render_string("{{ x.items }}", CONTEXT) == ["a", "b"]
    assert templating.render_string("{{ x.keys }}", CONTEXT) == "k"


def test_undefined_names_and_missing_keys_render_to_none() -> None:
    assert templating.render_string("{{ missing }}", CONTEXT) is None
    assert templating.render_string("{{ workload.missing }}", CONTEXT) is None
    assert templating.render_string("v={{ missing }}", CONTEXT) == "v="


@pytest.mark.parametrize(("text", "value"), [
    ("{{ missing.deeper }}", None), ("{{ missing.deeper.still }}", None),
    ("{{ missing['k'] }}", None), ("v={{ workload.nope.x }}", "v="),
    ("{{ workload.nope.x == 1 }}", False), ("{{ 2 in workload.nope.x }}", False),
    ("{% if workload.nope.x %}y{% endif %}", ""), ("{{ workload.nope.x | list }}", []),
    ("{{ fecth.rows | int }}", 0), ("{{ fecth.rows | len }}", 0),
])
def test_reading_a_field_of_an_undefined_value_is_undefined_as_in_noetl(
        text: str, value: object) -> None:
    # NoETL's server and tools render with minijinja in `Chainable` mode.
    assert templating.render_string(text, CONTEXT, step="s", field="f") == value


def test_arithmetic_and_ordering_on_an_undefined_read_are_errors_naming_it() -> None:
    context = {"workload": {"target": {"region": "eu"}}, "fetch": {"rows": []}}
    with pytest.raises(TemplateError) as exc:
        templating.render_string("{{ workload.traget.n + 1 }}", context, step="s", field="url")
    text = str(exc.value)
    assert 'step "s"' in text and 'field "url"' in text and "workload.traget.n" in text
    assert "`traget` is undefined; did you mean `target`?" in text
    with pytest.raises(TemplateError, match="`fecth` is undefined; did you mean `fetch`"):
        templating.render_string("{{ fecth.rows > 2 }}", context)
    with pytest.raises(TemplateError, match="on a null value"):
        templating.render_string("{{ x.a.b - 1 }}", {"x": None})


def test_a_used_read_of_an_undefined_value_is_logged_once_naming_step_field_and_the_name(
        caplog: pytest.LogCaptureFixture) -> None:
    context = {"workload": {"target": {"region": "eu"}}}
    caplog.set_level(logging.WARNING, logger="noetl_stream.dsl.templating")
    for _ in range(3):
        assert templating.render_string("{{ workload.traget.region }}", context, step="s",
                                        field="url") is None
    (record,) = caplog.records
    message = record.getMessage()
    assert 'step "s" field "url"' in message and "workload.traget.region" in message
    assert "`traget` is undefined; did you mean `target`?" in message


def test_a_guarded_read_of_an_undefined_value_is_not_logged(
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="noetl_stream.dsl.templating")
    assert templating.render_string("{{ workload.gone.x | default(3) }}", CONTEXT) == 3
    assert templating.render_string("{{ workload.gone.x is defined }}", CONTEXT) is False
    assert caplog.records == []


@pytest.mark.parametrize(("text", "value"), [
    ("{{ missing.deeper | default(3) }}", 3), ("{{ workload.nope.x | default('d') }}", "d"),
    ("{{ missing.deeper is defined }}", False), ("{{ missing is defined }}", False),
    ("{{ 1 if missing else 2 }}", 2), ("{% if missing %}y{% else %}n{% endif %}", "n"),
    ("{{ missing is defined and missing.x }}", False),
])
def test_default_is_defined_and_if_keep_working(text: str, value: object) -> None:
    assert templating.render_string(text, CONTEXT) == value


def test_render_walks_dicts_and_lists() -> None:
    value = {"a": ["{{ workload.n }}", "k={{ workload.name }}"], "b": {"c": "{{ x.items }}"}, "d": 4}
    assert templating.render(value, CONTEXT) == {"a": [2, "k=x"], "b": {"c": ["a", "b"]}, "d": 4}


def test_tojson_and_fromjson_filters_round_trip() -> None:
    assert templating.render_string("x={{ workload.items | tojson }}", CONTEXT) == "x=[1,2,3]"
    assert templating.render_string("{{ '[1, 2]' | fromjson }}", CONTEXT) == [1, 2]


def test_text_one_expression_gives_that_spells_a_value_is_that_value_as_in_noetl() -> None:
    # NoETL's server (render_to_value) and Rust tools (render_value) read the text of every
    # rendered field back as the value it spells, one expression or several parts alike.
    ctx = {"s": "42", "z": "007", "f": " 2.5 ", "t": "True", "n": "null", "id": "abc-1",
           "big": "123456789012345678901234", "doc": {"a": [1, {"b": None}]}, "e": ""}
    assert templating.render_string("{{ s }}", ctx) == 42
    assert templating.render_string("{{ z }}", ctx) == 7  # Rust's i64 parse reads "007" as 7
    assert templating.render_string("{{ f }}", ctx) == 2.5
    assert templating.render_string("{{ t }}", ctx) is True
    assert templating.render_string("{{ n }}", ctx) is None
    assert templating.render_string("{{ big }}", ctx) == 1.2345678901234568e23
    assert templating.render_string("{{ doc | tojson }}", ctx) == {"a": [1, {"b": None}]}
    assert templating.render_string("{{ [1, 'x'] | tojson }}", ctx) == [1, "x"]
    # Text that spells no value, and text inside a larger value, stay text.
    assert templating.render_string("{{ id }}", ctx) == "abc-1"
    assert templating.render_string("{{ e }}", ctx) == ""
    assert templating.render_string("{{ 'x' | tojson }}", ctx) == '"x"'
    assert templating.render_string("{{ [s] }}", ctx) == ["42"]
    assert templating.render_string("{{ {'k': s} }}", ctx) == {"k": "42"}
    assert templating.render_string("plain 42", ctx) == "plain 42"


def test_text_a_keychain_template_renders_is_read_as_json_only_as_noetls_worker_reads_it() -> None:
    ctx = {"keychain": {"db": {"password": "007", "pin": "42", "word": "True",
                               "doc": '{"a": 1}'}}, "workload": {"zip": "007"}}
    assert templating.render_string("{{ keychain.db.password }}", ctx) == "007"
    assert templating.render_string("{{ keychain.db.word }}", ctx) == "True"
    assert templating.render_string("{{ keychain.db.pin }}", ctx) == 42
    assert templating.render_string("{{ keychain.db.doc }}", ctx) == {"a": 1}
    assert templating.render_string("{{ workload.zip }}", ctx) == 7  # NoETL's server reads 7


@pytest.mark.parametrize("word", ["False", "false", " no ", "0", "", "None", "null", "off"])
def test_truthy_treats_false_words_as_false(word: str) -> None:
    assert templating.truthy(word) is False


@pytest.mark.parametrize("value", ["yes", "True", "anything", 1, [0]])
def test_truthy_treats_other_values_as_true(value: object) -> None:
    assert templating.truthy(value) is True


def test_guard_from_a_mixed_template_saying_false_is_false() -> None:
    assert templating.evaluate_guard("{% if flag %}True{% else %}False{% endif %}", CONTEXT) is False
    assert templating.evaluate_guard("{{ text }}", CONTEXT) is False
    assert templating.evaluate_guard("{{ workload.n > 1 }}", CONTEXT) is True


def test_guard_none_is_true() -> None:
    assert templating.evaluate_guard(None, CONTEXT) is True


def test_runtime_error_names_step_field_and_expression() -> None:
    with pytest.raises(TemplateError) as caught:
        templating.render_string("{{ 1 / 0 }}", CONTEXT, step="load", field="tool.url")
    assert str(caught.value).startswith('step "load" field "tool.url": template \'{{ 1 / 0 }}\': ')
    assert isinstance(caught.value, ValueError)


def test_sandbox_hides_unsafe_attributes_and_refuses_to_call_them() -> None:
    assert templating.render_string("{{ ''.__class__ }}", CONTEXT) is None
    with pytest.raises(TemplateError, match="unsafe"):
        templating.render_string("{{ workload.n.__class__.__subclasses__() }}", CONTEXT)


def test_syntax_problem_reports_unparseable_templates_only() -> None:
    assert templating.syntax_problem("{{ a.b }} and {% if x %}y{% endif %}") is None
    assert templating.syntax_problem("{{ a. }}") is not None
    assert templating.syntax_problem("{% if x %}") is not None


def test_referenced_names_lists_top_level_names_read() -> None:
    value = {"url": "{{ api.base }}/{{ page }}", "list": ["{{ items | default(fallback) }}"],
             "plain": "no template", "n": 3}
    assert templating.referenced_names(value) == {"api", "page", "items", "fallback"}


def test_referenced_names_ignores_attributes_filters_and_literals() -> None:
    assert templating.referenced_names("{{ a.b.c | upper }}{{ 'lit' ~ d['key'] }}") == {"a", "d"}


def test_template_strings_finds_nested_templates() -> None:
    value = {"a": ["x", "{{ y }}"], "b": {"c": "{% if z %}1{% endif %}"}}
    assert list(templating.template_strings(value)) == ["{{ y }}", "{% if z %}1{% endif %}"]


# -- bounded work: a template cannot stall the process that renders it ----------------------

@pytest.mark.parametrize(("template", "says"), [
    ("{% for i in range(100000) %}{% for j in range(20000) %}x{% endfor %}{% endfor %}",
     "loop iterations"),
    ("{% set xs = range(100000)|list %}{% for a in xs %}{% for b in xs %}{% endfor %}{% endfor %}",
     "loop iterations"),
    ("{{ range(10**9)|list }}", "range() of 1000000000 items"),
    ("{{ 'x' * 10**10 }}", "repeating"),
    ("{{ [0] * 10**9 }}", "repeating"),
    ("{{ 7 ** 100000 }}", "bits"),
    ("{% for i in range(90000) %}{{ 'abcdefghij' * 5 }}{% endfor %}", "characters"),
])
def test_unbounded_work_is_a_template_error_naming_step_and_field(template: str, says: str) -> None:
    started = time.perf_counter()
    with pytest.raises(TemplateError) as caught:
        render_string(template, {}, step="build", field="input.rows")
    assert time.perf_counter() - started < 5
    text = str(caught.value)
    assert says in text and 'step "build"' in text and 'field "input.rows"' in text


def test_work_within_the_bounds_renders() -> None:
    assert render_string("{{ range(100000)|list|length }}", {}) == 100000
    assert render_string("{{ 2 ** 64 }}", {}) == 2 ** 64
    assert render_string("{% for i in range(3) %}{{ loop.index }}{% endfor %}", {}) == 123


@pytest.mark.slow
def test_each_render_has_its_own_budget() -> None:
    template = "{% for i in range(100000) %}{% for j in range(5) %}{% endfor %}{% endfor %}"
    for _ in range(3):
        assert render_string(template, {}) == ""


def test_renders_are_deterministic() -> None:
    values = {render_string("{{ range(100) | list | sum }}", {}) for _ in range(5)}
    assert values == {4950}


ROWS = {"rows": [{"k": i % 7, "v": str(i)} for i in range(20_000)], "text": "ab" * 50_000}


@pytest.mark.slow
@pytest.mark.parametrize("template", [
    "{% for i in range(1000) %}{{ rows | groupby('k') | length }}{% endfor %}",
    "{% for i in range(1000) %}{{ rows | sort(attribute='v') | first }}{% endfor %}",
    "{% for i in range(1000) %}{{ rows | selectattr('k', 'equalto', 3) | list | length }}{% endfor %}",
    "{% for i in range(100000) %}{{ text.upper()[0] }}{% endfor %}",
    "{% for i in range(100000) %}{% if 'zz' in text %}1{% endif %}{% endfor %}",
    "{% for i in range(100000) %}{% if rows[-1] in rows %}1{% endif %}{% endfor %}",
    "{% for i in range(100000) %}{{ (text ~ text) | length }}{% endfor %}",
    "{% for i in range(1000) %}{{ rows | tojson | length }}{% endfor %}",
])
def test_work_on_the_context_is_counted_against_the_budget(template: str) -> None:
    started = time.process_time()
    with pytest.raises(TemplateError) as caught:
        render_string(template, ROWS, step="build", field="set.x")
    assert time.process_time() - started < 3
    assert "budget of 1,000,000 operations" in str(caught.value)


NESTED = {"a": [[0] * 100_000], "b": [[0] * 100_000]}  # equal, but not the same objects


@pytest.mark.parametrize("template", [
    "{% for i in range(100000) %}{{ a == b }}{% endfor %}",
    "{% for i in range(100000) %}{{ a[0] in b }}{% endfor %}",
    "{% for i in range(100000) %}{{ [a, b] | sort | length }}{% endfor %}",
])
def test_nested_values_are_counted_all_the_way_down(template: str) -> None:
    started = time.process_time()
    with pytest.raises(TemplateError, match="budget"):
        render_string(template, NESTED)
    assert time.process_time() - started < 3


def test_text_and_constant_time_filters_leave_room_for_large_values() -> None:
    big = {"text": "x" * 3_000_000, "rows": list(range(900_000))}
    assert render_string("{{ text | length }}", big) == 3_000_000
    assert render_string("{{ rows | length }}", big) == 900_000
    assert render_string("{{ text | replace('x', 'y') | first }}", big) == "y"


@pytest.mark.slow
def test_the_templates_rendered_together_share_one_budget() -> None:
    half = "{% for i in range(10) %}{{ rows | groupby('k') | length }}{% endfor %}"
    assert len(str(templating.render({"a": half}, ROWS)["a"])) == 10
    with pytest.raises(TemplateError, match="budget") as caught:
        templating.render({"a": half, "b": half}, ROWS, step="build", field="set")
    assert 'field "set.b"' in str(caught.value)


@pytest.mark.slow
def test_the_budget_is_the_same_on_every_render() -> None:
    # A count, not a clock: the same template fails or succeeds alike, however loaded the host.
    near = "{% for i in range(10) %}{{ rows | groupby('k') | length }}{% endfor %}"
    assert {len(str(render_string(near, ROWS))) for _ in range(3)} == {10}


def test_render_data_gives_the_value_as_a_state_stores_it() -> None:
    rendered = templating.render_data({"pair": "{{ (1, 2) }}", "n": "{{ 2 + 2 }}"}, {})
    assert rendered == {"pair": [1, 2], "n": 4}  # a tuple is a list, as it is once committed


def test_render_data_of_a_value_nothing_can_store_names_its_field() -> None:
    with pytest.raises(TemplateError, match=r"set\.big.*beyond 64 bits"):
        templating.render_data({"ok": "{{ 1 }}", "big": "{{ 2 ** 64 }}"}, {}, step="s", field="set")


def test_a_document_of_this_runtimes_own_keeps_text_and_refuses_a_read_of_an_undefined_value(
        ) -> None:
    # A trigger's payload is not a playbook: an execution id stays the id it is, and a payload
    # reading `message` when a fire by hand has none fails, naming it, instead of starting an
    # execution on nulls.
    context = {"event": {"execution_id": "384655138598602108"}}
    rendered = templating.render_own({"parent": "{{ event.execution_id }}"}, context,
                                     field="payload")
    assert rendered == {"parent": "384655138598602108"}
    with pytest.raises(TemplateError) as exc:
        templating.render_own({"amount": "{{ message.data.amount }}"}, context, field="payload")
    assert 'field "payload.amount"' in str(exc.value) and "message" in str(exc.value)
    # The same templates in a playbook read as NoETL reads them.
    assert render_string("{{ event.execution_id }}", context) == 384655138598602108
    assert render_string("{{ message.data.amount }}", context) is None
