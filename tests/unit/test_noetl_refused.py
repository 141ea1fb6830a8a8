"""Every NoETL form this runtime refuses is a validation error that names the form and says what
to write instead; none of them is a mere "unknown key" warning."""

from __future__ import annotations

import pytest
from unit_helpers import FILE, playbook_text

from noetl_stream.dsl import noetl_refused, parse_playbook
from noetl_stream.dsl.support import NOETL_NATS_OPERATIONS
from noetl_stream.errors import PlaybookError

REQUIRED = {"python": "code: 'result = 1'", "shell": "command: 'true'", "duckdb": "command: SELECT 1",
            "postgres": "command: SELECT 1\n      auth: pg", "nats": "operation: kv_get\n      "
            "bucket: b\n      key: k", "playbook": "path: ./child.yaml", "http": "url: http://x",
            "noop": "", "transfer": "source: {type: postgres, query: SELECT 1, auth: pg}\n      "
            "target: {type: postgres, table: t, auth: pg}"}


def errors_of(text: str) -> list[tuple[str | None, int | None, str]]:
    with pytest.raises(PlaybookError) as caught:
        parse_playbook(text, FILE, strict=False)
    return [(i.field, i.line, i.message) for i in caught.value.issues if i.severity == "error"]


TOOL_FIELDS = sorted((place.removeprefix("tool:"), key) for place, key in noetl_refused.FIELDS
                     if place.startswith("tool:"))


@pytest.mark.parametrize(("kind", "key"), TOOL_FIELDS, ids=[f"{k}-{f}" for k, f in TOOL_FIELDS])
def test_every_refused_task_field_is_an_error_naming_it_and_what_to_write_instead(
        kind: str, key: str) -> None:
    kind = "http" if kind == "*" else kind
    text = playbook_text(f"workflow:\n  - step: start\n    tool:\n      kind: {kind}\n"
                         f"      {key}: x\n      {REQUIRED[kind]}\n")
    form, instead = noetl_refused.FIELDS.get((f"tool:{kind}", key)) or \
        noetl_refused.FIELDS[("tool:*", key)]

    errors = errors_of(text)

    assert (f"tool.{key}", 9, f'NoETL form not run here: "{key}" ({form}); instead, {instead}') \
        in errors


def test_top_level_vars_is_refused_naming_workload_instead() -> None:
    text = playbook_text("vars: {a: 1}\nworkflow:\n  - step: start\n")
    (error,) = errors_of(text)
    assert error[:2] == ("vars", 5) and "`workload:`" in error[2]


@pytest.mark.parametrize("kind", sorted(noetl_refused.KINDS))
def test_every_noetl_kind_not_run_here_is_refused_with_what_to_write_instead(kind: str) -> None:
    text = playbook_text(f"workflow:\n  - step: start\n    tool:\n      kind: {kind}\n")
    (error,) = errors_of(text)
    assert error == ("tool.kind", 8, f'NoETL form not run here: tool kind "{kind}"; instead, '
                                     f"{noetl_refused.KINDS[kind]}")


@pytest.mark.parametrize("operation", NOETL_NATS_OPERATIONS)
def test_noetl_nats_operations_not_run_here_are_refused_listing_ours(operation: str) -> None:
    text = playbook_text(f"workflow:\n  - step: start\n    tool:\n      kind: nats\n"
                         f"      operation: {operation}\n      bucket: b\n")
    (error,) = errors_of(text)
    assert error[0] == "tool.operation" and f'nats operation "{operation}"' in error[2]
    assert "instead, use one of kv_get, kv_put" in error[2]


def test_a_templated_nats_operation_is_left_to_the_tool() -> None:
    text = playbook_text("workflow:\n  - step: start\n    tool:\n      kind: nats\n"
                         "      operation: '{{ ctx.op }}'\n      bucket: b\n")
    assert parse_playbook(text, FILE, strict=True).playbook.steps[0].tasks[0].kind == "nats"


def test_http_auth_gcp_adc_is_refused_saying_how_to_send_a_token() -> None:
    text = playbook_text("workflow:\n  - step: start\n    tool:\n      kind: http\n"
                         "      url: http://x\n      auth: {type: gcp_adc, scopes: [a]}\n")
    (error,) = errors_of(text)
    assert error[0] == "tool.auth.type" and 'http auth type "gcp_adc"' in error[2]
    assert "keychain" in error[2]


@pytest.mark.parametrize("key", ["rhai", "when_rhai"])
def test_case_forms_of_noetls_cli_are_refused_saying_what_to_write(key: str) -> None:
    text = playbook_text("workflow:\n  - step: start\n    tool: {kind: noop}\n    case:\n"
                         f"      - {{{key}: x, when: 'true', then: {{next: [{{step: b}}]}}}}\n"
                         "  - step: b\n")
    errors = errors_of(text)
    form, instead = noetl_refused.FIELDS[("case", key)]
    assert ("case[0]." + key, 9, f'NoETL form not run here: "{key}" ({form}); instead, '
                                 f"{instead}") in errors


@pytest.mark.parametrize("entry", ["{when: '{{ true }}', then: [{step: b}]}", "{next: [{step: b}]}"])
def test_legacy_conditional_next_entries_of_noetls_cli_are_refused(entry: str) -> None:
    text = playbook_text(f"workflow:\n  - step: start\n    next: [{entry}]\n  - step: b\n")
    (error,) = errors_of(text)
    assert error[0] == "next.arcs[0]" and error[2].startswith("NoETL form not run here: ")
    assert "`{step: NAME, when: ...}`" in error[2]


def test_http_auth_provider_form_of_noetls_cli_is_refused() -> None:
    text = playbook_text("workflow:\n  - step: start\n    tool:\n      kind: http\n"
                         "      url: http://x\n      auth: {provider: adc, scopes: [a]}\n")
    (error,) = errors_of(text)
    assert error[0] == "tool.auth.type" and "`auth: {provider, scopes}`" in error[2]


def test_the_token_template_function_of_noetls_python_engine_is_refused() -> None:
    text = playbook_text("workflow:\n  - step: start\n    tool:\n      kind: http\n"
                         "      url: http://x\n"
                         "      headers: {Authorization: \"Bearer {{ token('gcp') }}\"}\n")
    (error,) = errors_of(text)
    assert error[2].startswith("NoETL form not run here: template function token(...)")
    assert "keychain.<name>.access_token" in error[2]


def test_a_workload_value_named_token_is_still_read() -> None:
    text = playbook_text("workflow:\n  - step: start\n    tool:\n      kind: http\n"
                         "      url: http://x\n      headers: {Authorization: \"Bearer {{ token }}\"}\n")
    assert parse_playbook(text, FILE, strict=True).playbook.steps[0].name == "start"


def test_tool_fields_under_the_tasks_spec_are_refused_saying_to_move_them_beside_kind() -> None:
    text = playbook_text("workflow:\n  - step: start\n    tool:\n      kind: http\n      spec:\n"
                         "        url: http://x\n        method: GET\n        timeout: 5\n")
    errors = errors_of(text)
    assert ("tool.spec.url", 10, "NoETL form not run here: `url` under the task's `spec:` (no NoETL "
            "engine reads tool fields there); instead, write `url:` beside `kind:`") in errors
    assert [e[0] for e in errors if e[0] and e[0].startswith("tool.spec.")] == \
        ["tool.spec.method", "tool.spec.url"]
