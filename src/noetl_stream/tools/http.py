"""`http`: one request with aiohttp. Result = parsed body; a non-2xx reply is an error outcome with
`status` and `retryable` so task policies can decide (ARCHITECTURE §8).
"""

from __future__ import annotations

from typing import Any

import aiohttp
import orjson

from noetl_stream.tools.base import Outcome, TaskCall, ToolServices

RETRYABLE_STATUS = frozenset({408, 425, 429, 500, 502, 503, 504})
DEFAULT_TIMEOUT_S = 60.0


def _query_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (dict, list)):
        return orjson.dumps(value).decode()
    return str(value)


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
        headers = {str(k): str(v) for k, v in (cfg.get("headers") or {}).items() if v is not None}
        kwargs: dict[str, Any] = {"params": params, "headers": headers}
        if cfg.get("json") is not None:
            kwargs["json"] = cfg["json"]
        else:
            body = cfg.get("body", cfg.get("data", cfg.get("payload")))
            if isinstance(body, (dict, list)):
                kwargs["json"] = body
            elif body is not None:
                kwargs["data"] = str(body)
        timeout_s = float(cfg.get("timeout") or call.timeout_s or DEFAULT_TIMEOUT_S)
        kwargs["timeout"] = aiohttp.ClientTimeout(total=timeout_s)
        try:
            async with self._client().request(method, str(url), **kwargs) as resp:
                raw = await resp.read()
                body_value = _parse_body(raw, resp.headers.get("Content-Type", ""))
                http = {"status": resp.status, "headers": dict(resp.headers)}
                if resp.status < 400:
                    return Outcome.success(body_value, http=http)
                return Outcome.failure(
                    f"HTTP {resp.status} {resp.reason or ''} from {method} {url}".replace("  ", " "),
                    "http", retryable=resp.status in RETRYABLE_STATUS, status=resp.status,
                    body=body_value, http=http)
        except TimeoutError:
            return Outcome.failure(f"{method} {url} timed out after {timeout_s:g}s", "timeout",
                                   retryable=True)
        except aiohttp.ClientError as exc:
            return Outcome.failure(f"{method} {url} failed: {exc}", "connection", retryable=True)
        except ValueError as exc:
            return Outcome.failure(f"{method} {url}: bad request: {exc}", "config")

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()


def _parse_body(raw: bytes, content_type: str) -> Any:
    if not raw:
        return None
    if "json" in content_type or raw[:1] in (b"{", b"["):
        try:
            return orjson.loads(raw)
        except orjson.JSONDecodeError:
            pass
    return raw.decode("utf-8", errors="replace")
