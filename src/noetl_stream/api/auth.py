"""Who is calling and what they may do.

Every request but the public ones (`/health`, login) carries `Authorization: Bearer <token>`,
where the token is a session token (`nss_...`, from POST /api/sessions) or an API key
(`nsk_...`, from `noetl-stream apikey create`). The middleware resolves it to a `Principal` and
checks the endpoint's permission against the principal's roles before the handler runs. The
user behind a token must still exist: removing a user locks out their sessions and keys at once.

Without an authenticator (`server --no-auth`) every caller is an anonymous admin; `run --ui`
accepts only the random token made for its run (still an anonymous admin).
"""

from __future__ import annotations

import hmac
from dataclasses import dataclass
from typing import Literal

from aiohttp import web
from aiohttp.typedefs import Handler, Middleware

from noetl_stream.api.endpoints import Endpoint, Permission
from noetl_stream.api.errors import ApiError
from noetl_stream.state.sessions import SESSION_TOKEN_PREFIX, SessionRecord, SessionStore
from noetl_stream.state.users import API_KEY_PREFIX, ApiKeyStore, Role, UserRecord, UserStore

ALL_PERMISSIONS: frozenset[Permission] = frozenset(
    {"read", "run", "control", "catalog.write", "vars.write", "credentials.write",
     "credentials.data", "sessions.any"})

ROLE_PERMISSIONS: dict[Role, frozenset[Permission]] = {
    "admin": ALL_PERMISSIONS,
    "operator": frozenset({"read", "run", "control", "catalog.write", "vars.write"}),
    "viewer": frozenset({"read"}),
    "worker": frozenset({"read", "credentials.data"}),
}

ENDPOINTS = web.AppKey("noetl_api_endpoints", dict[object, Endpoint])


@dataclass(frozen=True)
class Principal:
    user: str
    roles: tuple[Role, ...]
    via: Literal["session", "api_key", "anonymous"]
    session_id: str | None = None
    key_id: str | None = None

    def may(self, permission: Permission) -> bool:
        return any(permission in ROLE_PERMISSIONS[r] for r in self.roles)


ANONYMOUS = Principal(user="anonymous", roles=("admin",), via="anonymous")
PRINCIPAL = web.RequestKey("noetl_principal", Principal)


class Authenticator:
    """Turns bearer tokens into principals, and user names and passwords into sessions."""

    def __init__(self, users: UserStore, keys: ApiKeyStore, sessions: SessionStore) -> None:
        self.users = users
        self.keys = keys
        self.sessions = sessions

    async def authenticate(self, token: str) -> Principal | None:
        if token.startswith(SESSION_TOKEN_PREFIX):
            session = await self.sessions.lookup(token)
            if session is None:
                return None
            user = await self.users.get(session.user)
            # The same name re-added later is another user: the old sessions stay dead.
            if user is None or session.user_since != user.created_at:
                return None
            return Principal(session.user, tuple(session.roles), "session",
                             session_id=session.session_id)
        if token.startswith(API_KEY_PREFIX):
            key = await self.keys.lookup(token)
            owner = await self.users.get(key.user) if key is not None else None
            if key is None or owner is None or not key.belongs_to(owner):
                return None
            return Principal(key.user, tuple(key.roles), "api_key", key_id=key.key_id)
        return None

    async def login_with_password(self, user: str, password: str,
                                  client: str | None) -> tuple[str, SessionRecord] | None:
        record = await self.users.verify(user, password)
        return await self._open_session(record, client) if record is not None else None

    async def login_with_key(self, api_key: str, client: str | None) -> tuple[str, SessionRecord] | None:
        key = await self.keys.lookup(api_key)
        if key is None:
            return None
        user = await self.users.get(key.user)
        if user is None or not key.belongs_to(user):
            return None
        # A session from a key has the key's roles, which may be fewer than the user's.
        return await self.sessions.create(user.name, list(key.roles), client=client,
                                          user_since=user.created_at)

    async def _open_session(self, user: UserRecord, client: str | None) -> tuple[str, SessionRecord]:
        return await self.sessions.create(user.name, list(user.roles), client=client,
                                          user_since=user.created_at)


def principal(request: web.Request) -> Principal:
    found: Principal = request.get(PRINCIPAL, ANONYMOUS)
    return found


def require(request: web.Request, permission: Permission) -> Principal:
    who = principal(request)
    if not who.may(permission):
        raise ApiError(403, f'"{who.user}" (roles {", ".join(who.roles)}) may not do this: it '
                       f'needs the "{permission}" permission', details={"permission": permission})
    return who


def _bearer(request: web.Request) -> str | None:
    header = request.headers.get("Authorization", "")
    scheme, _, token = header.partition(" ")
    return token.strip() if scheme.lower() == "bearer" and token.strip() else None


def auth_middleware(authenticator: Authenticator | None, *,
                    run_token: str | None = None) -> Middleware:
    """The middleware for `authenticator` (None: authentication is off; then `run_token`, when
    given, is the one bearer token accepted, as an admin: `run --ui`).
    """

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        endpoint = request.app[ENDPOINTS].get(request.match_info.route)
        if (endpoint is not None and endpoint.permission is None) or request.method == "OPTIONS":
            return await handler(request)
        if authenticator is None and run_token is not None:
            if not hmac.compare_digest((_bearer(request) or "").encode(), run_token.encode()):
                raise ApiError(401, "missing or wrong bearer token: open the address that "
                               "`noetl-stream run --ui` printed, which carries this run's token")
            request[PRINCIPAL] = ANONYMOUS
        elif authenticator is None:
            request[PRINCIPAL] = ANONYMOUS
        else:
            token = _bearer(request)
            who = await authenticator.authenticate(token) if token else None
            if who is None:
                raise ApiError(401, "missing, unknown or expired bearer token; log in with POST "
                               "/api/sessions or use an API key")
            request[PRINCIPAL] = who
        if endpoint is not None and endpoint.permission is not None:
            require(request, endpoint.permission)
        return await handler(request)

    return middleware
