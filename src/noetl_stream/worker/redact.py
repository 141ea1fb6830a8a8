"""Keeping secrets out of published events.

A tool marks the parts of its result that are secret with `Outcome.meta["redact"]`, a list of
dotted paths into the result (`["value"]`; `[""]` for the whole result). The pipeline collects the
values at those paths while it runs, so later tasks of the same step still see them; the worker
replaces every occurrence with `***` in the event it publishes (result, ctx patch, error), so
nothing downstream of the event stream, the router, watchers and `--json` included, ever holds them.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from noetl_stream.tools.base import Outcome

MASK = "***"
# A shorter secret is masked only where it is the whole string: masking every "ab" in a
# document would mangle it and reveal the secret's length and places anyway.
MIN_SUBSTRING_LEN = 4


def _leaves(value: object) -> Iterable[str]:
    if isinstance(value, str):
        if value:
            yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from _leaves(v)
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from _leaves(v)
    elif value is not None and not isinstance(value, bool):
        yield str(value)


def secret_values(outcome: Outcome) -> set[str]:
    """The string values an outcome's `meta["redact"]` paths point at."""
    paths = outcome.meta.get("redact") or ()
    if not isinstance(paths, Iterable):
        raise TypeError(f"meta.redact is a {type(paths).__name__}, not a list of paths")
    found: set[str] = set()
    for path in paths:
        node: object = outcome.result
        for part in (p for p in str(path).split(".") if p):
            if isinstance(node, dict):
                node = node.get(part)
            elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
                node = node[int(part)]
            else:
                node = None
                break
        found.update(_leaves(node))
    return found


def _scrub_mapping(value: dict[object, object], secrets: set[str]) -> dict[object, object]:
    """Keys are masked like values (code may key a mapping by a token or a password). Two keys
    that mask alike stay apart as `***`, `***#2`, ... in their order, so no value is lost.
    """
    out: dict[object, object] = {}
    for key, item in value.items():
        masked = scrub(key, secrets) if isinstance(key, str) else key
        if masked != key:
            base, n = masked, 1
            while masked in out or masked in value:
                n += 1
                masked = f"{base}#{n}"
        out[masked] = scrub(item, secrets)
    return out


def scrub(value: Any, secrets: set[str]) -> Any:
    """`value` with every secret replaced by `***` (a copy; `value` is not changed)."""
    if not secrets:
        return value
    if isinstance(value, str):
        if value in secrets:
            return MASK
        for secret in secrets:
            if len(secret) >= MIN_SUBSTRING_LEN and secret in value:
                value = value.replace(secret, MASK)
        return value
    if isinstance(value, dict):
        return _scrub_mapping(value, secrets)
    if isinstance(value, (list, tuple)):
        return [scrub(v, secrets) for v in value]
    if isinstance(value, (int, float)) and not isinstance(value, bool) and str(value) in secrets:
        return MASK
    return value


# NoETL's workers also redact by name and by shape, whatever the tool marked: the value of any
# key that names a secret, and any text that looks like one, becomes REDACTED in the step result
# they store (noetl/worker `src/scrub.rs`, mirroring `noetl/core/sanitize.py`). Later steps read
# the stored result, so they see the marker too, on NoETL and here alike.
REDACTED = "[REDACTED]"

# Matched against the key lowercased with `-` as `_`, whole or as a substring (`db_password`,
# `X-Api-Key`, also `author`: NoETL's rule is that broad).
SENSITIVE_KEY_TOKENS = (
    "password", "passwd", "pwd", "secret", "token", "bearer", "api_key", "apikey",
    "access_token", "refresh_token", "auth_token", "authorization", "auth", "credential",
    "credentials", "private_key", "privatekey", "secret_key", "secretkey", "client_secret",
    "clientsecret", "connection_string", "connectionstring", "db_password",
    "database_password", "aws_secret", "gcp_key", "azure_key", "ssh_key", "sshkey", "passphrase",
    "pem", "cert", "certificate", "oauth_token", "id_token", "encryption_key", "decrypt_key",
    "master_key", "snowflake_password", "snowflake_token", "private_key_passphrase", "keychain",
    "api_secret", "apisecret", "auth0_token", "auth0_id_token", "auth0_refresh_token", "idtoken",
    "oauth", "jwt",
)
# Prefixes of vendors' API keys and tokens, found anywhere in a text after a separator.
VENDOR_PREFIXES = ("sk-ant-", "sk-", "AIza", "ya29.", "ghp_", "ghs_", "gho_", "ghu_", "ghr_",
                   "github_pat_", "xoxb-", "xoxa-", "xoxp-", "xoxr-", "xoxs-")
_BOUNDARY = frozenset(" \t\n\r\"':=,")
_MIN_SECRET_TEXT = 8  # shorter texts are never taken for secrets (ids would be)
_MIN_VENDOR_RUN = 12


def is_sensitive_key(key: str) -> bool:
    normalised = key.lower().replace("-", "_")
    return any(token in normalised for token in SENSITIVE_KEY_TOKENS)


def _token_run(text: str) -> int:
    run = 0
    for char in text:
        if not (char.isascii() and (char.isalnum() or char in "_-")):
            break
        run += 1
    return run


def _has_vendor_token(text: str) -> bool:
    for prefix in VENDOR_PREFIXES:
        at = text.find(prefix)
        while at != -1:
            if (at == 0 or text[at - 1] in _BOUNDARY) \
                    and _token_run(text[at + len(prefix):]) >= _MIN_VENDOR_RUN:
                return True
            at = text.find(prefix, at + len(prefix))
    return False


def looks_like_secret(text: str) -> bool:
    """A bearer or basic credential, a JWT, a PEM private key or a vendor's API key."""
    if len(text) < _MIN_SECRET_TEXT:
        return False
    if text.startswith("-----BEGIN ") and "PRIVATE KEY-----" in text:
        return True
    if text.lower().startswith(("bearer ", "basic ")) and len(text.split()) >= 2:
        return True
    if text.startswith("eyJ"):
        parts = text.split(".")
        if len(parts) == 3 and parts[1].startswith("eyJ") and all(parts):
            return True
    return _has_vendor_token(text)


def redact_sensitive(value: object) -> object:
    """`value` with NoETL's redaction applied (a copy; `value` is not changed)."""
    if isinstance(value, dict):
        return {key: REDACTED if isinstance(key, str) and is_sensitive_key(key)
                else redact_sensitive(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [redact_sensitive(item) for item in value]
    if isinstance(value, str) and looks_like_secret(value):
        return REDACTED
    return value


def redact_secret_texts(value: object) -> object:
    """`value` with only secret-shaped texts redacted, its keys left alone: for what is keyed by
    names of ours (a step's printed output, keyed by task name), not by the tool's data.
    """
    if isinstance(value, dict):
        return {key: redact_secret_texts(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [redact_secret_texts(item) for item in value]
    if isinstance(value, str) and looks_like_secret(value):
        return REDACTED
    return value


def redact_outcome(body: dict[str, Any]) -> dict[str, Any]:
    """An outcome event's body with its result and error redacted by name and shape, and the
    printed output (keyed by task names) by shape only.
    """
    out = dict(body)
    for part in ("result", "error"):
        if out.get(part) is not None:
            out[part] = redact_sensitive(out[part])
    if out.get("output") is not None:
        out["output"] = redact_secret_texts(out["output"])
    if isinstance(out.get("input"), dict):
        out["input"] = {task: _redacted_call(call) for task, call in out["input"].items()}
    return out


def _redacted_call(call: object) -> object:
    """A task's rendered call without its config (code, SQL and commands are texts that may
    hold a literal secret no name or shape gives away) and with its input redacted.
    """
    if not isinstance(call, dict):
        return REDACTED
    kept = {k: v for k, v in call.items() if k not in ("config", "input")}
    if "input" in call:
        kept["input"] = redact_sensitive(call["input"])
    return kept
