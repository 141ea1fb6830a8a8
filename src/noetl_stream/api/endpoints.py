"""What every route module declares and every handler uses.

An `Endpoint` is a handler plus what the app needs to know about it: the permission it requires
(checked by the auth middleware before the handler runs), and the models of its query, body and
answer (read by `openapi.py`). The route table is data, so the document cannot drift from the
routes.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal, TypeVar

from aiohttp import web
from pydantic import BaseModel

from noetl_stream import jsonutil
from noetl_stream.api.errors import ApiError
from noetl_stream.jsonutil import JsonValue

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
Permission = Literal["read", "run", "control", "catalog.write", "vars.write", "credentials.write",
                     "credentials.data", "sessions.any"]
M = TypeVar("M", bound=BaseModel)


@dataclass(frozen=True)
class Endpoint:
    method: str
    path: str  # OpenAPI form: /api/catalog/{path}
    handler: Handler
    summary: str
    permission: Permission | None  # None: no authentication needed
    tag: str
    body: type[BaseModel] | None = None
    body_required: bool = True
    any_body: bool = False  # an optional body of any JSON value (a signal's data)
    query: type[BaseModel] | None = None
    response: type[BaseModel] | None = None
    status: int = 200
    errors: tuple[int, ...] = ()
    headers: tuple[tuple[str, str], ...] = ()  # (name, description) of request headers read
    raw_body: str | None = None  # another accepted body type, e.g. "text/yaml"
    produces: str = "application/json"
    route_path: str | None = None  # the aiohttp pattern when it differs from `path`
    # Authenticated by a signature over the body (a webhook): any body type is accepted, as no
    # page of another site can sign what it sends (api/request_guard.py).
    signed_body: bool = False

    @property
    def operation_id(self) -> str:
        return self.handler.__name__.lstrip("_")


def json_response(data: BaseModel | Mapping[str, object] | Sequence[object],
                  status: int = 200) -> web.Response:
    body = data.model_dump_json().encode() if isinstance(data, BaseModel) else jsonutil.dumps(data)
    return web.Response(status=status, body=body, content_type="application/json")


async def read_json(request: web.Request) -> JsonValue:
    """The body as JSON (any value); 422 when it is not JSON. The size limit is the app's."""
    raw = await request.read()
    if not raw.strip():
        raise ApiError(422, "request body is empty; a JSON document is expected")
    try:
        data: JsonValue = jsonutil.loads(raw)
    except ValueError:
        raise ApiError(422, "request body is not valid JSON") from None
    return data


async def read_body(request: web.Request, model: type[M]) -> M:
    """The body validated by `model`; 422 with every problem when it does not fit."""
    data = await read_json(request)
    return model.model_validate(data)


def read_query(request: web.Request, model: type[M]) -> M:
    # Query strings are flat: keep the last value of a repeated name.
    return model.model_validate(dict(request.query))
