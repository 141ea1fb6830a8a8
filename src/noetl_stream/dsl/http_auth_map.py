"""NoETL's Python engine's http `auth:` map, `{alias: {type, key, provider, ...}}`, read as the
inline form the http tool takes.

NoETL's Python engine (noetl/core/auth/resolver.py `resolve_auth_map`) resolves each alias of
the map, a stored credential named by `key` unless `provider` says otherwise, and its http tool
presents the one alias given (noetl/tools/http/auth.py). One alias from the credential store
reads here as `{type, credential: <key>, ...}`; a map of several aliases, or one from another
provider (a cloud secret manager), is refused saying what to write. Pure.
"""

from __future__ import annotations

from typing import TypeGuard

from noetl_stream.jsonutil import JsonObject, JsonValue

# Keys of the inline form (NoETL's Rust AuthConfig and its Python tool's spellings): a mapping
# holding any of them is that form, not an alias map.
_INLINE_KEYS = frozenset({"type", "credential", "token", "username", "user", "password",
                          "header", "key", "value", "scopes", "provider", "source", "name"})
_STORE = "credential_store"
_INSTEAD = ("store the secret as a credential (`noetl-stream credential set NAME ...`) and name "
            "it: `auth: NAME`")


def is_auth_map(auth: JsonValue) -> TypeGuard[JsonObject]:
    """`{alias: {...}}`: a mapping of mappings with none of the inline form's keys."""
    return (isinstance(auth, dict) and bool(auth) and not set(auth) & _INLINE_KEYS
            and all(isinstance(v, dict) for v in auth.values()))


def unwrap(auth: JsonObject) -> JsonObject | str:
    """The one alias of an auth map as the inline form, or why it cannot be read."""
    if len(auth) != 1:
        return ("NoETL form not run here: an http `auth:` map of several aliases (NoETL's Python "
                "engine presents none of them then); instead, " + _INSTEAD)
    ((alias, spec),) = auth.items()
    assert isinstance(spec, dict)
    provider = spec.get("provider", _STORE)
    if provider != _STORE:
        return (f'NoETL form not run here: http `auth:` alias "{alias}" from provider '
                f'"{provider}" (NoETL\'s Python engine\'s auth map); instead, {_INSTEAD}')
    out = {k: v for k, v in spec.items() if k not in ("key", "provider")}
    if "key" in spec:
        out["credential"] = spec["key"]
    if not out.get("type") and not out.get("credential"):
        return (f'http `auth:` alias "{alias}" needs `key` (the credential) or `type` (NoETL\'s '
                f"Python engine's auth map); instead, {_INSTEAD}")
    return out
