"""`keychain:` declarations and the payload limit: parsing, every validation message, and which
commands carry the declarations."""

from __future__ import annotations

import textwrap

import pytest
from unit_helpers import FILE, parse, playbook_text

from noetl_stream import refs
from noetl_stream.dsl import Playbook, parse_playbook
from noetl_stream.dsl.keychain import KeychainEntry, for_command, reads
from noetl_stream.errors import PlaybookError

WORKFLOW = """\
workflow:
  - step: start
"""


def errors_of(body: str) -> list[str]:
    with pytest.raises(PlaybookError) as caught:
        parse_playbook(playbook_text(textwrap.dedent(body) + WORKFLOW), FILE)
    return [str(i) for i in caught.value.issues if i.severity == "error"]


def parse_with(body: str) -> Playbook:
    return parse(textwrap.dedent(body) + WORKFLOW)


def test_every_kind_parses_with_its_fields() -> None:
    pb = parse_with("""\
        keychain:
          - {name: cfg, kind: static, base_url: "https://api", retries: 3}
          - {name: tok, kind: bearer, token: "{{ workload.token }}"}
          - {name: one, kind: env, env: API_KEY}
          - {name: many, kind: env, env: {user: DB_USER, password: DB_PASSWORD}}
          - {name: pg, kind: credential, credential: pg_local, cache: global}
          - name: api
            kind: oauth2
            token_url: https://auth/token
            client_id: app
            client_secret: "{{ workload.secret }}"
            scope: read
            audience: https://api
            auth_method: post
        """)

    assert [(e.name, e.kind) for e in pb.keychain] == [
        ("cfg", "static"), ("tok", "bearer"), ("one", "env"), ("many", "env"),
        ("pg", "credential"), ("api", "oauth2")]
    assert pb.keychain[0].config == {"base_url": "https://api", "retries": 3}
    assert pb.keychain[3].config == {"env": {"user": "DB_USER", "password": "DB_PASSWORD"}}
    assert pb.keychain[5].config["auth_method"] == "post"
    assert pb.keychain[5].line == 11


def test_spec_example_kind_postgres_credential_reads_the_credential_named_like_the_entry() -> None:
    pb = parse_with("keychain:\n  - {name: pg_k8s, kind: postgres_credential}\n")

    assert pb.keychain == (KeychainEntry(name="pg_k8s", kind="credential",
                                         config={"credential": "pg_k8s"}, line=6),)


def test_oauth2_may_take_its_client_from_a_credential() -> None:
    pb = parse_with("keychain:\n  - {name: api, kind: oauth2, credential: api_client}\n")

    assert pb.keychain[0].config == {"credential": "api_client"}


def test_unknown_kind_suggests_the_nearest_one() -> None:
    assert errors_of("keychain:\n  - {name: api, kind: oauth}\n") == [
        'test.yaml:6: field "keychain[0].kind": unknown keychain kind "oauth"; did you mean '
        '"oauth2"? (known: static, bearer, env, credential, oauth2)']


def test_missing_fields_are_named_each_with_the_entry_and_line() -> None:
    assert errors_of("""\
        keychain:
          - {name: tok, kind: bearer}
          - name: api
            kind: oauth2
            client_id: app
        """) == [
        'test.yaml:6: field "keychain[0].token": keychain entry "tok" (bearer) needs "token" '
        "(a literal or a template)",
        'test.yaml:7: field "keychain[1].token_url": keychain entry "api" (oauth2) needs '
        '"token_url" (or "credential" naming a stored credential that holds it)',
        'test.yaml:7: field "keychain[1].client_secret": keychain entry "api" (oauth2) needs '
        '"client_secret" (or "credential" naming a stored credential that holds it)']


def test_bad_values_are_errors() -> None:
    assert errors_of("""\
        keychain:
          - {name: e, kind: env, env: [A, B]}
          - {name: o, kind: oauth2, credential: c, auth_method: jwt}
          - {name: c, kind: credential, cache: forever}
          - {name: s, kind: static}
        """) == [
        'test.yaml:6: field "keychain[0].env": keychain entry "e" (env) needs "env": a variable '
        "name, or a mapping of field -> variable",
        'test.yaml:7: field "keychain[1].auth_method": keychain entry "o" (oauth2) "auth_method" '
        'is basic or post, not "jwt"',
        'test.yaml:8: field "keychain[2].cache": keychain entry "c" (credential) "cache" is '
        'execution or global, not "forever"',
        'test.yaml:9: field "keychain[3].": keychain entry "s" (static) needs at least one field '
        "besides name and kind"]


def test_names_must_be_template_names_and_unique() -> None:
    assert errors_of("""\
        keychain:
          - {name: my-key, kind: env, env: A}
          - {name: k, kind: env, env: A}
          - {name: k, kind: env, env: B}
          - {kind: env, env: C}
        """) == [
        "test.yaml:6: field \"keychain[0].name\": name 'my-key' is not usable as keychain.<name>; "
        "use letters, digits and _",
        'test.yaml:8: field "keychain[2].name": keychain name "k" is used twice',
        'test.yaml:9: field "keychain[3].name": needs a name of letters, digits and _ (read as '
        "keychain.<name>)"]


def test_keychain_must_be_a_list_and_secret_manager_is_not_built() -> None:
    assert errors_of("keychain: {a: 1}\n") == [
        'test.yaml:5: field "keychain": keychain must be a list of {name, kind, ...}']
    assert errors_of("keychain:\n  - {name: s, kind: secret_manager}\n") == [
        'test.yaml:6: field "keychain[0].kind": NoETL form not run here: keychain kind '
        '"secret_manager"; instead, store the secret as a credential (`noetl-stream credential '
        "set`) and declare it with `kind: credential`"]


def test_unknown_field_of_a_kind_is_a_warning_with_a_suggestion() -> None:
    result = parse_playbook(playbook_text(
        "keychain:\n  - {name: t, kind: bearer, token: x, tokn: y}\n" + WORKFLOW), FILE)

    assert [str(w) for w in result.warnings] == [
        'test.yaml:6: field "keychain[0].tokn": warning: unknown key "tokn"; did you mean "token"?']
    assert result.playbook.keychain[0].config == {"token": "x"}


def test_template_syntax_in_a_declaration_is_checked() -> None:
    found = errors_of("keychain:\n  - {name: t, kind: bearer, token: \"{{ x. }}\"}\n")
    assert len(found) == 1 and found[0].startswith('test.yaml:6: field "keychain[0]": template')


def test_commands_carry_declarations_for_the_first_start_run_and_for_readers_only() -> None:
    pb = parse_with("keychain:\n  - {name: t, kind: bearer, token: \"{{ workload.tok }}\"}\n")
    declared = [{"name": "t", "kind": "bearer", "config": {"token": "{{ workload.tok }}"}}]

    assert for_command(pb.keychain, set(), first=True) == declared
    assert for_command(pb.keychain, {"keychain", "x"}, first=False) == declared
    assert for_command(pb.keychain, {"x"}, first=False) == []
    assert for_command((), {"keychain"}, first=True) == []
    assert reads(pb.keychain) == {"workload"}


def test_payload_limit_is_read_from_the_executor_and_validated() -> None:
    pb = parse_with("executor:\n  spec: {policy: {limits: {max_payload_bytes: 4096}}}\n")
    assert refs.max_payload_bytes(pb.executor) == 4096
    assert refs.max_payload_bytes({}) == refs.DEFAULT_MAX_PAYLOAD_BYTES
    assert errors_of("executor:\n  spec: {policy: {limits: {max_payload_bytes: ten}}}\n") == [
        'test.yaml:5: field "executor.spec.policy.limits.max_payload_bytes": must be a whole '
        "number of bytes, at least 1024 (got 'ten')"]


def test_reference_shape() -> None:
    ref = refs.make_ref("ab" * 32, 10)
    assert ref == {"$ref": {"store": "noetl_results", "key": "ab" * 32, "size": 10,
                            "checksum": "sha256:" + "ab" * 32}}
    assert refs.is_json_ref(ref)
    binary = refs.make_ref("cd" * 32, 3, encoding="binary", content_type="image/png")
    assert refs.ref_of(binary) is not None and not refs.is_json_ref(binary)
    assert refs.ref_of({"$ref": {"store": "elsewhere", "key": "k"}}) is None
    assert refs.ref_of({"$ref": ref["$ref"], "extra": 1}) is None
