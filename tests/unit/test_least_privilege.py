"""Pure parts of least privilege: masking keys, the python child's environment, scopes."""

from __future__ import annotations

from noetl_stream.credentials import CredentialScope
from noetl_stream.tools.sandbox import clean_environment
from noetl_stream.tools.secrets import is_worker_setting
from noetl_stream.worker.redact import scrub


def test_secrets_used_as_mapping_keys_are_masked_and_keep_their_values_apart() -> None:
    value = {"tok-123456": 1, "x": {"pw-abcdef": "tok-123456", "tok-123456-suffix": 3}, "***": 0}

    masked = scrub(value, {"tok-123456", "pw-abcdef"})

    assert masked == {"***#2": 1, "x": {"***": "***", "***-suffix": 3}, "***": 0}


def test_python_children_get_only_what_python_needs_and_the_operator_allows() -> None:
    worker = {"PATH": "/usr/bin", "LANG": "en_US.UTF-8", "LC_ALL": "C", "HOME": "/root",
              "NOETL_STREAM_SECRET_KEY": "k", "NOETL_STREAM_NATS_PASSWORD": "p",
              "AWS_SECRET_ACCESS_KEY": "a", "HTTPS_PROXY": "http://proxy:3128"}

    env = clean_environment(worker, home="/tmp/sandbox", extra_names=["HTTPS_PROXY"])

    assert env == {"PATH": "/usr/bin", "LANG": "en_US.UTF-8", "LC_ALL": "C",
                   "HOME": "/tmp/sandbox", "HTTPS_PROXY": "http://proxy:3128"}


def test_a_scope_names_playbooks_by_pattern_and_nothing_else() -> None:
    scope = CredentialScope(playbooks=["reports/*", "etl/load"])

    assert scope.allows("reports/daily") and scope.allows("etl/load")
    assert not scope.allows("etl/load2") and not scope.allows(None)
    assert not CredentialScope().allows("reports/daily")


def test_the_workers_own_settings_are_never_an_env_secret() -> None:
    assert is_worker_setting("NOETL_STREAM_SECRET_KEY")
    assert not is_worker_setting("AWS_ACCESS_KEY_ID")
