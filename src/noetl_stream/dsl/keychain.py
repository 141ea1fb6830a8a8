"""`keychain:` declarations (spec 002 §2.1): parsed and validated here, resolved by the worker.

A declaration names material a playbook needs and how to get it; templates read the resolved
material as `{{ keychain.<name>.<field> }}`. Declarations hold no resolved secret, so they may
travel in commands: the worker resolves them (worker/keychain.py) and nothing it resolves is
written back into commands, router state or events.
"""

from __future__ import annotations

import re
from collections.abc import Collection
from typing import Protocol

from pydantic import BaseModel, ConfigDict, Field

from noetl_stream.dsl import templating
from noetl_stream.dsl.source import line_of, plain, suggest
from noetl_stream.jsonutil import JsonObject, JsonValue

KINDS = ("static", "bearer", "env", "credential", "oauth2")
# Kinds spec 002 names in its example: the first resolves a stored credential, the second needs
# an external secret manager, which this build does not reach.
ALIASES = {"postgres_credential": "credential", "credential_ref": "credential"}
# NoETL keychain kinds this runtime does not resolve -> what to write instead.
NOT_RUN = {
    **dict.fromkeys(("secret_manager", "secrets"),
                    "store the secret as a credential (`noetl-stream credential set`) and "
                    "declare it with `kind: credential`"),
    **dict.fromkeys(("google_id_token", "google_oauth", "google_service_account", "google"),
                    "fetch the token with a `kind: oauth2` entry (token_url, client_id, "
                    "client_secret), or store it as a bearer credential and declare it with "
                    "`kind: credential`"),
}
COMMON_KEYS = frozenset({"name", "kind", "desc", "description"})
CACHE_SCOPES = ("execution", "global")
FIELDS: dict[str, frozenset[str]] = {
    "bearer": frozenset({"token"}),
    "env": frozenset({"env"}),
    "credential": frozenset({"credential", "cache"}),
    "oauth2": frozenset({"token_url", "client_id", "client_secret", "credential", "scope",
                         "audience", "auth_method", "cache", "grant_type"}),
}
AUTH_METHODS = ("basic", "post")
_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class KeychainEntry(BaseModel):
    """One declaration: `config` holds its kind's fields as written (templates unrendered)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(description="Read in templates as keychain.<name>.")
    kind: str = Field(description="static | bearer | env | credential | oauth2")
    config: JsonObject = Field(default_factory=dict, description="The kind's fields.")
    line: int | None = None


class Reporter(Protocol):
    """The parser's issue collector, as this module uses it."""

    def error(self, line: int | None, message: str, step: str | None = None,
              field: str | None = None) -> None: ...

    def unknown_keys(self, node: object, known: Collection[str], step: str | None,
                     prefix: str) -> None: ...

    def check_templates(self, value: object, line: int | None, step: str | None,
                        fld: str) -> None: ...


def parse_keychain(raw: JsonValue, doc: JsonObject, report: Reporter) -> tuple[KeychainEntry, ...]:
    """The declarations of `keychain:`, reporting every problem with its line."""
    if raw is None:
        return ()
    if not isinstance(raw, list):
        report.error(line_of(doc, "keychain"), "keychain must be a list of {name, kind, ...}",
                     None, "keychain")
        return ()
    entries: list[KeychainEntry] = []
    seen: set[str] = set()
    for index, item in enumerate(raw):
        entry = _parse_entry(item, line_of(raw, index), f"keychain[{index}]", report)
        if entry is None:
            continue
        if entry.name in seen:
            report.error(entry.line, f'keychain name "{entry.name}" is used twice', None,
                         f"keychain[{index}].name")
        seen.add(entry.name)
        entries.append(entry)
    return tuple(entries)


def _parse_entry(item: JsonValue, line: int | None, where: str, report: Reporter) -> KeychainEntry | None:
    if not isinstance(item, dict):
        report.error(line, "a keychain entry is a mapping with name and kind", None, where)
        return None
    line = line_of(item) or line
    name = item.get("name")
    ok = True
    if not isinstance(name, str) or not _NAME_RE.match(name):
        report.error(line_of(item, "name") or line,
                     "needs a name of letters, digits and _ (read as keychain.<name>)"
                     if name is None else f"name {name!r} is not usable as keychain.<name>; use "
                     "letters, digits and _", None, f"{where}.name")
        ok = False
    kind = item.get("kind", item.get("type"))  # NoETL's keychain also reads `type`
    label = f'keychain entry "{name}"' if isinstance(name, str) else "keychain entry"
    if kind is not None and not isinstance(kind, str):
        report.error(line_of(item, "kind") or line, f"{label} kind must be a word "
                     f"({', '.join(KINDS)})", None, f"{where}.kind")
        return None
    kind = ALIASES.get(str(kind), kind)
    if kind is None:
        report.error(line, f"{label} needs a kind ({', '.join(KINDS)}); NoETL's server form "
                     "without one (`credential`, `token_type`, `provider`, `map`) is not run "
                     "here: write `kind: credential` with `credential: NAME`", None,
                     f"{where}.kind")
        return None
    if kind in NOT_RUN:
        report.error(line_of(item, "kind") or line, f'NoETL form not run here: keychain kind '
                     f'"{kind}"; instead, {NOT_RUN[kind]}', None, f"{where}.kind")
        return None
    if kind not in KINDS:
        report.error(line_of(item, "kind") or line, f'unknown keychain kind "{kind}"'
                     f"{suggest(str(kind), (*KINDS, *ALIASES))} (known: {', '.join(KINDS)})",
                     None, f"{where}.kind")
        return None
    config = {k: plain(v) for k, v in item.items() if k not in COMMON_KEYS | {"type"}}
    translated = _noetl_spellings(kind, config)
    if isinstance(translated, str):
        report.error(line_of(item, "endpoint") or line, f"{label}: {translated}", None,
                     f"{where}.endpoint")
        return None
    config = translated
    if kind != "static":
        report.unknown_keys(item, COMMON_KEYS | FIELDS[kind] | _noetl_keys(kind, item), None,
                            f"{where}.")
        config = {k: v for k, v in config.items() if k in FIELDS[kind]}
    problems = _missing(kind, config)
    for fld, message in problems:
        report.error(line, f"{label} ({kind}) {message}", None, f"{where}.{fld}")
    report.check_templates(config, line, None, where)
    if not ok or problems:
        return None
    if kind == "credential" and "credential" not in config:
        config["credential"] = name  # spec 002's example names the credential by the entry
    return KeychainEntry(name=str(name), kind=str(kind), config=config, line=line)


def _noetl_keys(kind: str, item: JsonObject) -> set[str]:
    """The keys of NoETL's spellings of `kind`, which `_noetl_spellings` reads."""
    keys = {"type", "auto_renew"}
    if kind in ("credential", "bearer"):
        keys.add("scope")  # NoETL's server keychain takes it on every entry
    if kind == "credential":
        keys.add("ref")
    if kind == "oauth2" and "endpoint" in item:
        keys |= {"endpoint", "method", "headers", "data"}
    return keys


def _noetl_spellings(kind: str, config: JsonObject) -> JsonObject | str:
    """NoETL's ways of writing entries: a `static` entry's fields under `map:`, a credential's
    cache as `scope:` and its name as `ref:` (`credential_ref`); `auto_renew` is dropped (tokens
    are fetched again when they expire), so is the `scope:` of a static or bearer entry, and its
    Python engine's oauth2 form (`_noetl_oauth2`);
    a str says why a form cannot be read.
    """
    config = {k: v for k, v in config.items() if k != "auto_renew"}  # tokens renew here anyway
    if kind in ("static", "bearer") and config.get("scope") in CACHE_SCOPES and \
            (kind == "bearer" or "map" in config):
        # NoETL renders these again at every execution's start whatever their scope, as here.
        config = {k: v for k, v in config.items() if k != "scope"}
    if kind == "static" and set(config) == {"map"} and isinstance(config["map"], dict):
        return dict(config["map"])
    if kind == "oauth2" and "endpoint" in config and "token_url" not in config:
        return _noetl_oauth2(config)
    if kind == "credential" and config.get("scope") in CACHE_SCOPES and "cache" not in config:
        # NoETL's server keychain: `scope: global | execution` is how long a value is cached.
        config = {**{k: v for k, v in config.items() if k != "scope"}, "cache": config["scope"]}
    if kind == "credential" and "ref" in config and "credential" not in config:
        return {**{k: v for k, v in config.items() if k != "ref"}, "credential": config["ref"]}
    return config


_OAUTH2_FORM = frozenset({"grant_type", "client_id", "client_secret", "scope", "audience"})
_FORM_TYPE = "application/x-www-form-urlencoded"


def _noetl_oauth2(config: JsonObject) -> JsonObject | str:
    """NoETL's Python keychain form of oauth2 (POST `data` to `endpoint`) as this runtime's
    client-credentials entry, or why it cannot be. Its entry-level `scope` is a cache scope.
    """
    data = config.get("data") or {}
    given = config.get("headers") or {}
    headers = {k.lower(): v for k, v in given.items()} if isinstance(given, dict) else None
    method = str(config.get("method") or "POST").upper()
    if headers is None or not isinstance(data, dict) or not set(data) <= _OAUTH2_FORM or method != "POST" or \
            data.get("grant_type", "client_credentials") != "client_credentials" or \
            set(headers) - {"content-type"} or headers.get("content-type", _FORM_TYPE) != _FORM_TYPE:
        return ("NoETL form not run here: an oauth2 entry that POSTs any `data`, `method` or "
                "`headers` to `endpoint` (NoETL's Python keychain); instead, write `token_url`, "
                "`client_id`, `client_secret` (and `scope`, `audience`) for a client-credentials "
                "token, or fetch the token with an http step")
    out = {"token_url": config["endpoint"], "auth_method": "post",
           **{k: v for k, v in data.items() if k != "grant_type"}}
    if config.get("scope") in CACHE_SCOPES:
        out["cache"] = config["scope"]
    return out


def _missing(kind: str, config: JsonObject) -> list[tuple[str, str]]:
    """(field, message) for every field `kind` needs and `config` lacks or gets wrong."""
    out: list[tuple[str, str]] = []
    if kind == "static" and not config:
        out.append(("", "needs at least one field besides name and kind"))
    if kind == "bearer" and not config.get("token"):
        out.append(("token", 'needs "token" (a literal or a template)'))
    if kind == "env":
        env = config.get("env")
        if not env or not (isinstance(env, str) or (
                isinstance(env, dict) and all(isinstance(v, str) and v for v in env.values()))):
            out.append(("env", 'needs "env": a variable name, or a mapping of field -> variable'))
    if kind == "credential" and "credential" in config and not isinstance(config["credential"], str):
        out.append(("credential", '"credential" must be a credential name'))
    if kind == "oauth2":
        has_credential = isinstance(config.get("credential"), str) and config["credential"]
        for fld in ("token_url", "client_id", "client_secret"):
            if not config.get(fld) and not has_credential:
                out.append((fld, f'needs "{fld}" (or "credential" naming a stored credential '
                                 "that holds it)"))
        if config.get("auth_method", "basic") not in AUTH_METHODS:
            out.append(("auth_method", f'"auth_method" is basic or post, not '
                                       f'"{config["auth_method"]}"'))
        if config.get("grant_type", "client_credentials") != "client_credentials":
            out.append(("grant_type", "only the client_credentials grant is supported"))
    if kind in ("credential", "oauth2") and config.get("cache", "execution") not in CACHE_SCOPES:
        out.append(("cache", f'"cache" is execution or global, not "{config["cache"]}"'))
    return out


def declarations(entries: tuple[KeychainEntry, ...]) -> list[JsonObject]:
    """What a command carries: each entry's name, kind and fields as written."""
    return [{"name": e.name, "kind": e.kind, "config": e.config} for e in entries]


def for_command(entries: tuple[KeychainEntry, ...], reads: Collection[str], *,
                first: bool) -> list[JsonObject]:
    """The declarations a command carries: all of them when its templates read `keychain`, and
    for the start step's first run, so the keychain is resolved before the workflow goes on.
    """
    return declarations(entries) if entries and ("keychain" in reads or first) else []


def reads(entries: tuple[KeychainEntry, ...]) -> set[str]:
    """Names the declarations' own templates read (workload keys, say): a command that carries
    the declarations must carry these too.
    """
    if not entries:
        return set()
    return templating.referenced_names([e.config for e in entries]) - {"keychain"}
