"""Logging in and out: POST/GET /api/sessions, DELETE /api/sessions/{session_id}."""

from __future__ import annotations

import math
from datetime import UTC, datetime

from aiohttp import web

from noetl_stream.api.auth import Authenticator, principal
from noetl_stream.api.context import api_context
from noetl_stream.api.endpoints import Endpoint, json_response, read_body, read_query
from noetl_stream.api.errors import ApiError, not_found
from noetl_stream.api.models import Deleted, LoginBody, LoginReply, SessionList, SessionsQuery


def _authenticator(request: web.Request) -> Authenticator:
    auth = api_context(request).auth
    if auth is None:
        raise ApiError(404, "authentication is off on this server (--no-auth): there are no sessions")
    return auth


async def login(request: web.Request) -> web.StreamResponse:
    auth = _authenticator(request)
    throttle = api_context(request).login_throttle
    body = await read_body(request, LoginBody)
    client = request.remote
    keys = [f"addr:{client}"] + ([f"user:{body.user}"] if body.user is not None else [])
    wait = throttle.retry_after(*keys)
    if wait > 0:
        raise ApiError(429, "too many failed logins; try again later",
                       details={"retry_after_s": math.ceil(wait)},
                       headers={"Retry-After": str(math.ceil(wait))})
    if body.api_key is not None:
        opened = await auth.login_with_key(body.api_key, client)
    else:
        assert body.user is not None and body.password is not None  # LoginBody checked it
        opened = await auth.login_with_password(body.user, body.password, client)
    if opened is None:
        throttle.failed(*keys)
        # One answer for an unknown user, a wrong password and a bad key: no name probing.
        raise ApiError(401, "wrong user name, password or API key")
    throttle.succeeded(*keys)
    token, record = opened
    return json_response(LoginReply(token=token, session_id=record.session_id,
                                    expires_at=datetime.fromtimestamp(record.expires_at, UTC),
                                    user=record.user, roles=record.roles), 201)


async def list_sessions(request: web.Request) -> web.StreamResponse:
    auth = _authenticator(request)
    query = read_query(request, SessionsQuery)
    who = principal(request)
    user = query.user or who.user
    if user != who.user and not who.may("sessions.any"):
        raise ApiError(403, "only an admin may list another user's sessions")
    records = await auth.sessions.list(user)
    return json_response(SessionList(items=[r.info() for r in records]))


async def delete_session(request: web.Request) -> web.StreamResponse:
    auth = _authenticator(request)
    who = principal(request)
    session_id = request.match_info["session_id"]
    if session_id == "current":
        if who.session_id is None:
            raise not_found("a session behind this token (an API key is not a session)")
        session_id = who.session_id
    record = await auth.sessions.get(session_id)
    if record is None or (record.user != who.user and not who.may("sessions.any")):
        raise not_found(f'session "{session_id}"')  # another user's session is none of yours
    await auth.sessions.delete(session_id)
    return json_response(Deleted(deleted=session_id))


ENDPOINTS = [
    Endpoint("POST", "/api/sessions", login, "Log in with a user name and password or an API key",
             None, "sessions", body=LoginBody, response=LoginReply, status=201, errors=(401, 422, 429)),
    Endpoint("GET", "/api/sessions", list_sessions, "The caller's live sessions (admin: ?user=)",
             "read", "sessions", query=SessionsQuery, response=SessionList, errors=(403,)),
    Endpoint("DELETE", "/api/sessions/{session_id}", delete_session,
             "End a session; `current` is the caller's own", "read", "sessions", response=Deleted,
             errors=(404,)),
]
