"""Every error the HTTP API answers has one shape: `{"error": {"code", "message", "details"}}`.

One middleware maps exceptions to it: our own `ApiError`, aiohttp's HTTP exceptions (unknown
route, wrong method, body too large), pydantic validation, playbook and credential errors. A
reply never holds a traceback or an exception's repr; anything unexpected is logged with its
traceback and answered with a generic 500.
"""

from __future__ import annotations

import logging
from typing import TypedDict

from aiohttp import web
from aiohttp.typedefs import Handler
from pydantic import ValidationError

from noetl_stream import jsonutil
from noetl_stream.errors import CatalogError, CredentialError, NoetlStreamError, PlaybookError
from noetl_stream.formats import NewerFormat
from noetl_stream.state.users import AccountError

log = logging.getLogger("noetl_stream.api")

_CODES = {400: "bad_request", 401: "unauthorized", 403: "forbidden", 404: "not_found",
          405: "method_not_allowed", 409: "conflict", 413: "payload_too_large",
          415: "unsupported_media_type", 422: "invalid", 429: "too_many_requests",
          500: "internal"}


class ApiError(NoetlStreamError):
    """An answer other than success, with the status, code and details the client sees."""

    def __init__(self, status: int, message: str, *, code: str | None = None,
                 details: object = None, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.headers = headers or {}
        self.status = status
        self.code = code or _CODES.get(status, "error")
        self.message = message
        self.details = details


def not_found(what: str) -> ApiError:
    return ApiError(404, f"{what} not found")


def error_response(status: int, code: str, message: str, details: object = None,
                   headers: dict[str, str] | None = None) -> web.Response:
    body = {"error": {"code": code, "message": message, "details": details}}
    return web.Response(status=status, body=jsonutil.dumps(body), content_type="application/json",
                        headers=headers)


class FieldProblem(TypedDict):
    """One problem of a rejected body or query, as the error's `details` list it."""

    loc: list[str]
    message: str
    type: str


def validation_details(exc: ValidationError) -> list[FieldProblem]:
    """Where and why, never the input: a rejected value may be a secret."""
    return [{"loc": [str(p) for p in e["loc"]], "message": e["msg"], "type": e["type"]}
            for e in exc.errors()]


@web.middleware
async def error_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except ApiError as exc:
        return error_response(exc.status, exc.code, exc.message, exc.details, exc.headers)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise  # redirects and the like are answers, not errors
        reason = "request body is larger than the limit" if exc.status == 413 else exc.reason
        return error_response(exc.status, _CODES.get(exc.status, "error"), reason)
    except ValidationError as exc:
        return error_response(422, "invalid", "request is invalid", validation_details(exc))
    except PlaybookError as exc:
        issues = [{"file": i.file, "line": i.line, "step": i.step, "field": i.field,
                   "severity": i.severity, "message": i.message, "text": str(i)} for i in exc.issues]
        errors = sum(1 for i in exc.issues if i.severity == "error")
        return error_response(422, "invalid_playbook",
                              f"playbook is invalid for {errors} reason(s)", issues)
    except CatalogError as exc:
        return error_response(404, "not_found", str(exc))
    except (CredentialError, AccountError) as exc:
        return error_response(422, "invalid", str(exc))
    except NewerFormat as exc:
        # A record a newer release stored: this server neither shows nor rewrites it.
        log.warning("%s %s: %s", request.method, request.path, exc)
        return error_response(409, "newer_format", str(exc))
    except Exception:
        # The request boundary: whatever went wrong is logged here with its traceback, and the
        # client gets a fixed text, since an exception's message may hold internals or secrets.
        log.exception("%s %s failed", request.method, request.path)
        return error_response(500, "internal", "internal error; the server log has the details")
