"""`http`: one request with aiohttp. Result = parsed body; a reply of 400 or above is an error
outcome whose `kind` is NoETL's class of the status (`server_error`, `rate_limit`, `auth`,
`not_found`, `client_error`), with the status and `retryable` beside it, so task policies can
decide (ARCHITECTURE §8). Transport failures are kinds `timeout` and `connection`.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from typing import Any, TypedDict

import aiohttp
import orjson

from noetl_stream.credentials import Credential
from noetl_stream.dsl.layering import kind_default
from noetl_stream.errors import OutcomeErrorKind, ToolError
from noetl_stream.jsonutil import JsonValue
from noetl_stream.tools.base import Outcome, TaskCall, ToolServices

RETRYABLE_STATUS = frozenset({408, 425, 429, 500, 502, 503, 504})
DEFAULT_TIMEOUT_S = float(kind_default("http", "timeout"))  # dsl/layering.py: one table


def _query_value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (dict, list)):
        return orjson.dumps(value).decode()
    return str(value)


class _Request(TypedDict, total=False):
    """The aiohttp request options a task sets."""

    params: dict[str, str]
    headers: dict[str, str]
    json: JsonValue
    data: dict[str, str] | str
    timeout: aiohttp.ClientTimeout
    allow_redirects: bool
    ssl: bool


class HttpTool:
    kind = "http"

    def __init__(self, services: ToolServices | None = None) -> None:
        self.services = services or ToolServices()
        self._session: aiohttp.ClientSession | None = None

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            connector = aiohttp.TCPConnector(limit=256, ttl_dns_cache=300)
            self._session = aiohttp.ClientSession(connector=connector)
        return self._session

    async def run(self, call: TaskCall) -> Outcome:
        cfg = call.config
        url = cfg.get("url") or cfg.get("endpoint")
        if not url:
            return Outcome.failure("http task has no url", "config")
        method = str(cfg.get("method") or "GET").upper()
        params = {k: _query_value(v) for k, v in (cfg.get("params") or {}).items() if v is not None}
        headers = {str(k): _query_value(v) for k, v in (cfg.get("headers") or {}).items()
                   if v is not None}  # as NoETL: true, not True; a list or mapping as JSON
        if cfg.get("auth") is not None:
            auth = await self._auth_headers(cfg["auth"], call.execution_id)
            if isinstance(auth, Outcome):
                return auth
            headers.update(auth)
        kwargs: _Request = {"params": params, "headers": headers}
        problem = _add_body(kwargs, cfg)
        if problem is not None:
            return problem
        try:
            kwargs["timeout"], limits = _timeout(cfg.get("timeout") or call.spec.get("timeout"),
                                                 call.timeout_s)
        except (TypeError, ValueError) as exc:
            return Outcome.failure(f"http field timeout: {exc}", "config")
        response_type = cfg.get("response_type")
        if response_type is not None and response_type not in RESPONSE_TYPES:
            return Outcome.failure(f"http field response_type is {response_type!r}; use one of "
                                   f"{', '.join(RESPONSE_TYPES)}", "config")
        kwargs["allow_redirects"] = _flag(cfg.get("follow_redirects"), True)
        if not _flag(cfg.get("verify", cfg.get("verify_ssl")), True):
            kwargs["ssl"] = False
        if call.spec.get("idempotent") and not any(k.lower() == "idempotency-key" for k in headers):
            headers["Idempotency-Key"] = call.idempotency_key
        try:
            return await self._send(method, str(url), kwargs, response_type)
        except TimeoutError as exc:
            return Outcome.failure(f"{method} {url} {_timeout_message(exc, limits)}", "timeout",
                                   retryable=True, code="CONN_TIMEOUT")
        except aiohttp.ClientError as exc:
            return Outcome.failure(f"{method} {url} failed: {exc}", "connection", retryable=True,
                                   code=_connection_code(exc))
        except ValueError as exc:
            return Outcome.failure(f"{method} {url}: bad request: {exc}", "config")

    async def _send(self, method: str, url: str, kwargs: _Request,
                    response_type: str | None) -> Outcome:
        """One request and its reply as an outcome; transport errors are the caller's."""
        async with self._client().request(method, url, **kwargs) as resp:
            raw = await resp.read()
            body_value = _parse_body(raw, resp.headers.get("Content-Type", ""))
            http = {"status": resp.status, "headers": dict(resp.headers)}
            if resp.status < 400:
                # An error reply keeps the lenient parse above: its body explains the status.
                value, problem = _typed_body(raw, resp.headers.get("Content-Type", ""),
                                             resp.charset, response_type)
                if problem is not None:
                    return Outcome.failure(f"{method} {url}: {problem}", "response", http=http)
                if response_type == "binary" and self.services.results is not None:
                    # The bytes go to the object store; the result is a reference to them.
                    value = await self.services.results.put_binary(
                        raw, content_type=resp.headers.get("Content-Type") or None)
                return Outcome.success(value, http=http)
            return Outcome.failure(
                f"HTTP {resp.status} {resp.reason or ''} from {method} {url}".replace("  ", " "),
                status_kind(resp.status), retryable=resp.status in RETRYABLE_STATUS,
                body=body_value, http=http, **status_fields(resp.status, resp.headers))

    async def _auth_headers(self, auth: JsonValue, execution_id: str) -> dict[str, str] | Outcome:
        """`auth: <name>` (a stored credential) or an inline `{type, ...}` -> request headers."""
        name = auth if isinstance(auth, str) else auth.get("credential") if isinstance(auth, dict) \
            else None
        try:
            if name:
                if self.services.credentials is None:
                    return Outcome.failure(f'auth "{name}": this worker has no credential store',
                                           "auth")
                credential = await self.services.credentials.resolve(str(name),
                                                                     execution_id=execution_id)
            elif isinstance(auth, dict) and auth.get("type") == "none":
                return {}  # NoETL's explicit "no authentication"
            elif isinstance(auth, dict) and auth.get("type"):
                data = {k: v for k, v in auth.items() if k != "type"}
                credential = Credential(name="inline", kind=str(auth["type"]), data=data)
            else:
                return Outcome.failure("auth must be a credential name or {type: bearer|basic|api_key, "
                                       "...}", "config")
            return auth_headers(credential)
        except ToolError as exc:
            return Outcome.failure(str(exc), "auth")

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()


def _add_body(kwargs: _Request, cfg: Mapping[str, JsonValue]) -> Outcome | None:
    """The request body from `json`, `form` or `body` (`data`, `payload`); a failure if unusable."""
    form = cfg.get("form")
    if cfg.get("json") is not None:
        kwargs["json"] = cfg["json"]
    elif form is not None:
        if not isinstance(form, dict):
            return Outcome.failure("http field form must be a mapping of field -> value", "config")
        # A dict body is sent by aiohttp as application/x-www-form-urlencoded.
        kwargs["data"] = {str(k): _query_value(v) for k, v in form.items() if v is not None}
    else:
        body = cfg.get("body", cfg.get("data", cfg.get("payload")))
        if isinstance(body, (dict, list)):
            kwargs["json"] = body
        elif body is not None:
            kwargs["data"] = str(body)
    return None


def status_kind(status: int) -> OutcomeErrorKind:
    """NoETL's error kind for an HTTP status of 400 or above (noetl/core/errors.py)."""
    if status == 429:
        return "rate_limit"
    if status in (401, 403):
        return "auth"
    if status == 404:
        return "not_found"
    if 400 <= status < 500:
        return "client_error"
    if status >= 500:
        return "server_error"
    return "http"


def status_fields(status: int, headers: Mapping[str, str]) -> dict[str, int | str]:
    """The status under each name NoETL's engines read it by (`status`, `status_code`,
    `http_status`), its code `HTTP_<status>`, and `retry_after` when the reply says how long.
    """
    fields: dict[str, int | str] = {"status": status, "status_code": status, "http_status": status,
                              "code": f"HTTP_{status}"}
    retry_after = headers.get("Retry-After", "").strip()
    if retry_after.isdigit():
        fields["retry_after"] = int(retry_after)
    return fields


def _connection_code(exc: aiohttp.ClientError) -> str:
    if isinstance(exc, aiohttp.ClientConnectorDNSError):
        return "DNS_ERROR"
    if isinstance(exc, aiohttp.ClientConnectorError) and isinstance(exc.os_error,
                                                                    ConnectionRefusedError):
        return "CONN_REFUSED"
    return "CONN_ERROR"


def _parse_body(raw: bytes, content_type: str) -> JsonValue:
    if not raw:
        return None
    if "json" in content_type or raw[:1] in (b"{", b"["):
        try:
            parsed: JsonValue = orjson.loads(raw)
        except orjson.JSONDecodeError:
            pass
        else:
            return parsed
    return raw.decode("utf-8", errors="replace")


RESPONSE_TYPES = ("json", "text", "binary")
_FALSE_WORDS = frozenset({"false", "no", "off", "0"})


def _flag(value: object, default: bool) -> bool:
    """A yes/no field that may arrive as a rendered string ("False") rather than a bool."""
    if value is None:
        return default
    if isinstance(value, str):
        return value.strip().lower() not in _FALSE_WORDS
    return bool(value)


def _timeout(value: Any, fallback_s: float | None) -> tuple[aiohttp.ClientTimeout, dict[str, float]]:
    """`timeout: 30` caps the whole request; `{connect, read, total}` caps each phase."""
    if isinstance(value, dict):
        unknown = set(value) - {"connect", "read", "total"}
        if unknown:
            raise ValueError(f"timeout keys are connect, read and total, not {sorted(unknown)}")
        limits = {k: float(v) for k, v in value.items() if v is not None}
        if "total" not in limits and fallback_s:
            limits["total"] = float(fallback_s)  # the step's own timeout still bounds the request
        return aiohttp.ClientTimeout(total=limits.get("total"), sock_connect=limits.get("connect"),
                                     sock_read=limits.get("read")), limits
    total = float(value or fallback_s or DEFAULT_TIMEOUT_S)
    return aiohttp.ClientTimeout(total=total), {"total": total}


def _timeout_message(exc: TimeoutError, limits: dict[str, float]) -> str:
    if isinstance(exc, aiohttp.ConnectionTimeoutError) and "connect" in limits:
        return f"connect timed out after {limits['connect']:g}s"
    if isinstance(exc, aiohttp.SocketTimeoutError) and "read" in limits:
        return f"read timed out after {limits['read']:g}s (no data for that long)"
    if "total" in limits:
        return f"timed out after {limits['total']:g}s"
    return "timed out"


def _typed_body(raw: bytes, content_type: str, charset: str | None,
                response_type: str | None) -> tuple[JsonValue, str | None]:
    """The result for `response_type`, or a reason the body does not fit it."""
    if response_type is None:
        return _parse_body(raw, content_type), None
    if response_type == "binary":
        return {"encoding": "base64", "data": base64.b64encode(raw).decode("ascii"),
                "size": len(raw), "content_type": content_type or None}, None
    if response_type == "text":
        try:
            return raw.decode(charset or "utf-8", errors="replace"), None
        except LookupError:  # a charset Python does not know
            return raw.decode("utf-8", errors="replace"), None
    if not raw:
        return None, None
    try:
        return orjson.loads(raw), None
    except orjson.JSONDecodeError as exc:
        preview = raw[:80].decode("utf-8", errors="replace")
        return None, (f"response_type is json but the body is not JSON ({exc}); "
                      f"content type {content_type or 'none'}, body starts {preview!r}")


def auth_headers(credential: Credential) -> dict[str, str]:
    """The headers that present `credential`; raises ToolError (naming no secret) if it cannot."""
    data = credential.data
    try:
        if credential.kind == "bearer":
            return {"Authorization": f"Bearer {data['token']}"}
        if credential.kind == "basic":
            user = data["username"] if "username" in data else data["user"]  # NoETL: either
            pair = f"{user}:{data['password']}".encode()
            return {"Authorization": "Basic " + base64.b64encode(pair).decode("ascii")}
        if credential.kind == "api_key":
            # `value` here; NoETL's Rust tools carry the key as `token`, and NoETL's Python tool
            # names the header `key`.
            value = data["value"] if "value" in data else data["token"]
            return {str(data.get("header") or data.get("key") or "X-API-Key"): str(value)}
        if credential.kind == "header":  # NoETL's Python tool: the fields are the headers
            return {str(k): str(v) for k, v in data.items()}
    except KeyError as exc:
        raise ToolError(f'credential "{credential.name}" ({credential.kind}) has no field '
                        f"{exc.args[0]!r}") from None
    raise ToolError(f'credential "{credential.name}" is of kind "{credential.kind}", which cannot '
                    "authenticate an HTTP request (use bearer, basic or api_key)")
