"""NoETL's redaction of a step result by key name and by value shape (worker/redact.py)."""

from __future__ import annotations

import pytest

from noetl_stream.tools.base import Outcome
from noetl_stream.worker.redact import (
    REDACTED,
    is_sensitive_key,
    looks_like_secret,
    redact_secret_texts,
    redact_sensitive,
    secret_values,
)


@pytest.mark.parametrize("key", [
    "password", "db_password", "DB-Password", "api_key", "X-Api-Key", "Authorization",
    "access_token", "next_token", "client_secret", "credentials", "private_key", "ssh_key",
    "certificate", "jwt", "oauth_state", "author", "keychain",
])
def test_keys_naming_a_secret_whole_or_in_part(key: str) -> None:
    assert is_sensitive_key(key)


@pytest.mark.parametrize("key", ["user", "creds", "status", "rows", "key", "id", "stdout", "cwd_x"])
def test_other_keys(key: str) -> None:
    assert not is_sensitive_key(key)


@pytest.mark.parametrize("text", [
    "Bearer abc.def", "basic dXNlcjpwYXNz", "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.sig",
    "-----BEGIN RSA PRIVATE KEY-----\nMIIE\n-----END RSA PRIVATE KEY-----",
    "failed to auth with sk-ant-abcdefghijklmnop", "key=ghp_0123456789abcdef", "AIzaSyA1234567890abc",
])
def test_texts_shaped_like_a_secret(text: str) -> None:
    assert looks_like_secret(text)


@pytest.mark.parametrize("text", [
    "Bearer", "short", "sk-short", "risk-assessment-for-tomorrow", "eyJ.only", "plain text here",
    "xsk-abcdefghijklmnopq",
])
def test_texts_not_taken_for_secrets(text: str) -> None:
    assert not looks_like_secret(text)


def test_a_result_is_redacted_by_key_at_any_depth_and_by_value_anywhere() -> None:
    result = {
        "status": "ok",
        "rows": [{"user": "alice", "password": "hunter2"}],
        "headers": {"Authorization": "Bearer t0ken-value", "Content-Type": "application/json"},
        "creds": {"user": "bob", "api_key": {"nested": "whole subtree"}},
        "stdout": "Bearer abcdefgh",
        "count": 3,
    }

    assert redact_sensitive(result) == {
        "status": "ok",
        "rows": [{"user": "alice", "password": REDACTED}],
        "headers": {"Authorization": REDACTED, "Content-Type": "application/json"},
        "creds": {"user": "bob", "api_key": REDACTED},
        "stdout": REDACTED,
        "count": 3,
    }
    assert result["rows"][0]["password"] == "hunter2"  # a copy; the original is kept


def test_printed_output_keyed_by_task_names_is_redacted_by_shape_only() -> None:
    output = {"fetch_token": {"stdout": "Bearer abcdefgh12", "stderr": "", "stdout_bytes": 20,
                              "stderr_bytes": 0, "truncated": False}}

    assert redact_secret_texts(output) == {
        "fetch_token": {"stdout": REDACTED, "stderr": "", "stdout_bytes": 20, "stderr_bytes": 0,
                        "truncated": False}}


def test_the_values_a_tool_marks_secret_are_found_by_their_paths() -> None:
    outcome = Outcome.success({"token": "s3cret", "rows": [{"pw": "p1"}], "n": 1},
                              meta={"redact": ["token", "rows.0.pw", "missing.x"]})
    assert secret_values(outcome) == {"s3cret", "p1"}
    assert secret_values(Outcome.success({"token": "s3cret"})) == set()


def test_redact_paths_that_are_not_a_list_are_refused_with_the_reason() -> None:
    with pytest.raises(TypeError, match=r"meta\.redact is a int"):
        secret_values(Outcome.success({"token": "s3cret"}, meta={"redact": 5}))
