"""The HTTP API against paths and origins made to reach what it does not serve, on a real
listening API without authentication (the case where nothing but these checks stands between a
caller and the data): encoded `..` and NUL in the file-serving route and in names that become KV
keys or subjects, NATS wildcards in those names, and a state change posted without a body from
another origin or from an opaque one (`Origin: null`, a sandboxed frame or a `data:` page).
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from api_client import Api, running_api
from yarl import URL

from noetl_stream.bus.connection import Bus

pytestmark = pytest.mark.integration

SECRET_VALUE = "value-no-path-may-reach"
HOSTILE = (
    "/ui/..%2f..%2f..%2f..%2fetc%2fpasswd", "/ui/%2e%2e%2fui%2froutes.py", "/ui/..%2froutes.py",
    "/ui/common.js%00.js", "/ui/%2e%2e", "/ui/..%5c..%5cetc%5cpasswd",
    "/api/catalog/..%2f..%2f..%2fetc%2fpasswd", "/api/catalog/%3E", "/api/catalog/*",
    "/api/vars/%2A/secret", "/api/vars/%3E", "/api/vars/1/%3E", "/api/vars/1/..%2f..%2fsecret",
    "/api/executions/%3E", "/api/executions/*/events", "/api/triggers/%3E/history",
    "/api/credentials/%3E", "/api/credentials/..%2fsecret.key",
)


@pytest.fixture
async def open_api(bus: Bus) -> AsyncIterator[Api]:
    async with running_api(bus, auth=False) as api:
        yield api


async def _get_raw(api: Api, path: str) -> tuple[int, str]:
    """GET `path` exactly as written: no client-side normalisation of `..` or `%2f`."""
    async with api.http.get(URL(api.url + path, encoded=True)) as resp:
        return resp.status, await resp.text()


async def test_no_path_reaches_a_file_a_kv_wildcard_or_another_executions_var(
        open_api: Api, bus: Bus) -> None:
    kv = await bus.js.key_value("noetl_vars")
    await kv.put("384000000000000001.secret", f'"{SECRET_VALUE}"'.encode())
    for path in HOSTILE:
        status, text = await _get_raw(open_api, path)
        assert status in (400, 404, 422), (path, status, text[:300])
        for leaked in (SECRET_VALUE, "root:x:0:0", "def ui_endpoints", "import "):
            assert leaked not in text, (path, text[:300])
    # The var itself is there to be read by its own name.
    status, text = await _get_raw(open_api, "/api/vars/384000000000000001/secret")
    assert status == 200 and SECRET_VALUE in text


async def test_a_bodiless_state_change_from_another_or_an_opaque_origin_is_refused(
        open_api: Api) -> None:
    for origin in ("http://evil.example", "null", "http://127.0.0.1.evil.example"):
        for method, path in (("POST", "/api/executions/384000000000000001/cancel"),
                             ("POST", "/api/triggers/t/fire"), ("DELETE", "/api/catalog/x"),
                             ("POST", "/api/executions/384000000000000001/restart")):
            status, body = await open_api.call(method, path, headers={"Origin": origin})
            assert status == 403, (origin, method, path, body)
            assert body["error"]["code"] == "cross_origin"
