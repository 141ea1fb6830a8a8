"""`credential:`, the older spelling of `auth:`: the parser gives tools one field, and refuses
both spellings with different values."""

from __future__ import annotations

import pytest
from unit_helpers import FILE, parse, playbook_text

from noetl_stream.dsl import parse_playbook
from noetl_stream.errors import PlaybookError


@pytest.mark.parametrize("kind_fields", [
    "kind: http, url: 'http://x'", "kind: postgres, query: 'select 1'",
    "kind: duckdb, query: 'select 1'", "kind: nats, operation: kv_get, bucket: b, key: k",
])
def test_credential_is_read_as_auth_for_every_kind_that_takes_one(kind_fields: str) -> None:
    playbook = parse(f"""
        workflow:
          - step: start
            tool: {{{kind_fields}, credential: pg_main}}
    """, strict=True)

    (task,) = playbook.step("start").tasks
    assert task.config["auth"] == "pg_main"
    assert "credential" not in task.config


def test_credential_and_the_same_auth_are_one_field() -> None:
    playbook = parse("""
        workflow:
          - step: start
            tool: {kind: postgres, query: "select 1", credential: pg, auth: pg}
    """, strict=True)

    assert playbook.step("start").tasks[0].config == {"query": "select 1", "auth": "pg"}


def test_credential_and_a_different_auth_is_an_error_naming_file_line_step_and_field() -> None:
    text = playbook_text("""
        workflow:
          - step: load
            tool:
              kind: postgres
              query: "select 1"
              auth: pg_a
              credential: pg_b
    """)

    with pytest.raises(PlaybookError) as caught:
        parse_playbook(text, FILE)

    (issue,) = caught.value.issues
    assert (issue.file, issue.line, issue.step, issue.field) == (FILE, 11, "load", "tool.credential")
    assert '"credential" is the older spelling of "auth"' in issue.message


def test_credential_on_a_kind_without_auth_is_an_unknown_key() -> None:
    with pytest.raises(PlaybookError, match='unknown key "credential"'):
        parse("""
            workflow:
              - step: start
                tool: {kind: python, code: "result = 1", credential: x}
        """, strict=True)
