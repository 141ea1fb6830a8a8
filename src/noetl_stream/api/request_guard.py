"""What stops a page of another web site from using the API through its visitor's browser.

A browser sends a cross-site `<form>` POST, or a `fetch` in `no-cors` mode, without asking the
server first, as long as its body is `text/plain`, form-encoded or multipart. With a bearer
token nothing is lost (the page cannot attach it), but an API without authentication
(`server --no-auth`) would run whatever such a page posts. So on every route, whether
authentication is on or not:

- A state-changing request (POST, PUT, PATCH, DELETE) that carries an `Origin` header must come
  from the API's own origin or the `--cors-origin` one. Browsers send `Origin` with every such
  request, same-origin ones included; programs (the CLI, curl) send none and are not browsers.
- Its body, when it has one, is JSON (`application/json`), or YAML for the catalog's raw upload
  (`application/yaml`, `text/yaml`, `application/x-yaml`): types a browser never sends across
  sites without a preflight, which only the `--cors-origin` is granted. A route whose body is
  authenticated by a signature over it (`POST /api/hooks/<name>`) takes any type: a page of
  another site cannot sign what it sends, and webhook senders post forms and text too.
- Without authentication, every request (reads too: credentials are readable in clear) must
  name a host that no other site can point at this server by DNS: an IP address, `localhost`,
  or a name listed in NOETL_STREAM_HTTP_HOSTS (comma-separated). That stops DNS rebinding, where
  a site's own name is made to resolve to the API's address.
"""

from __future__ import annotations

import ipaddress
import os

from aiohttp import web
from aiohttp.typedefs import Handler, Middleware

from noetl_stream.api.auth import ENDPOINTS
from noetl_stream.api.errors import ApiError

ENV_HTTP_HOSTS = "NOETL_STREAM_HTTP_HOSTS"
STATE_CHANGING = frozenset({"POST", "PUT", "PATCH", "DELETE"})
JSON_TYPE = "application/json"
# The catalog's raw playbook upload; `text/plain` is not among them: browsers send it cross-site.
YAML_TYPES = ("text/yaml", "application/yaml", "application/x-yaml")


def allowed_host_names(source: dict[str, str] | None = None) -> frozenset[str]:
    raw = (os.environ if source is None else source).get(ENV_HTTP_HOSTS, "")
    return frozenset(n.strip().lower() for n in raw.replace(" ", ",").split(",") if n.strip())


def _host_name(host: str) -> str:
    """`host` of a Host header without its port (an IPv6 literal keeps no brackets)."""
    if host.startswith("["):
        return host[1:].split("]", 1)[0]
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host


def host_is_local_or_listed(host: str, listed: frozenset[str]) -> bool:
    """Whether no other site can make a browser send `host` here by pointing DNS at us."""
    name = _host_name(host).lower().rstrip(".")
    if name in listed or name == "localhost" or name.endswith(".localhost"):
        return True
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def _origin_of(request: web.Request) -> str:
    return f"{request.scheme}://{request.host}".lower()


def _check_origin(request: web.Request, cors_origin: str | None) -> None:
    origin = request.headers.get("Origin")
    if origin is None:
        return
    allowed = {_origin_of(request)} | ({cors_origin.rstrip("/").lower()} if cors_origin else set())
    if origin.rstrip("/").lower() not in allowed:
        raise ApiError(403, f'a {request.method} from the origin "{origin}" is refused: only '
                       "this API's own origin (or its --cors-origin) may change anything",
                       code="cross_origin")


def _has_body(request: web.Request) -> bool:
    return bool(request.content_length) or "chunked" in request.headers.get(
        "Transfer-Encoding", "").lower()


def _check_body_type(request: web.Request) -> None:
    if request.method == "DELETE" or not _has_body(request):
        return
    endpoint = request.app[ENDPOINTS].get(request.match_info.route) if ENDPOINTS in request.app \
        else None
    if endpoint is not None and endpoint.signed_body:
        return
    kind = request.content_type
    if kind == JSON_TYPE or kind in YAML_TYPES:
        return
    raise ApiError(415, f'a request body of type "{kind}" is refused: send JSON with '
                   f'"Content-Type: {JSON_TYPE}" (a playbook may also go to the catalog as '
                   f"{', '.join(YAML_TYPES)})", code="unsupported_media_type")


def request_guard(*, cors_origin: str | None, check_host: bool,
                  listed_hosts: frozenset[str] | None = None) -> Middleware:
    """The middleware; `check_host` for an API without authentication (see above)."""
    listed = allowed_host_names() if listed_hosts is None else listed_hosts

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        if check_host and not host_is_local_or_listed(request.host, listed):
            raise ApiError(403, f'the host "{request.host}" is refused: an API without '
                           "authentication answers only an IP address, localhost or a name "
                           f"listed in {ENV_HTTP_HOSTS}", code="unknown_host")
        if request.method in STATE_CHANGING:
            _check_origin(request, cors_origin)
            _check_body_type(request)
        return await handler(request)

    return middleware

