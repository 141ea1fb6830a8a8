"""The nats tool against a real nats-server: every operation, on the runtime's connection and
on another server named by a credential."""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import nats
import pytest
from fixed_credentials import Credentials
from nats.aio.client import Client
from nats.js.api import StreamConfig

from noetl_stream.bus.nats_server import NatsServer
from noetl_stream.credentials import Credential
from noetl_stream.testing.nats import run_nats_server
from noetl_stream.tools.base import Outcome, TaskCall, ToolServices
from noetl_stream.tools.nats import NatsTool

pytestmark = pytest.mark.integration


@pytest.fixture
async def nc(nats_server: NatsServer) -> AsyncIterator[Client]:
    client = await nats.connect(nats_server.url)
    js = client.jetstream()
    await js.create_key_value(bucket="cfg")
    await js.create_object_store(bucket="files")
    await js.add_stream(StreamConfig(name="ORDERS", subjects=["orders.>"], duplicate_window=60))
    try:
        yield client
    finally:
        await client.close()


@pytest.fixture
async def tool(nc: Client) -> NatsTool:
    return NatsTool(ToolServices(nats=nc))


def call(spec: dict[str, Any] | None = None, idem_key: str = "e1.s.1:None:t:1",
         **config: Any) -> TaskCall:
    return TaskCall(execution_id="e1", step="s", task="t", kind="nats", config=config, input={},
                    spec=spec or {}, idempotency_key=idem_key)


def ok(outcome: Outcome) -> Any:
    assert outcome.ok, outcome.error
    return outcome.result


async def test_kv_put_get_keys_delete_round_trip(tool: NatsTool) -> None:
    put = ok(await tool.run(call(operation="kv_put", bucket="cfg", key="greeting", value="hello")))
    ok(await tool.run(call(operation="kv_put", bucket="cfg", key="limits.max",
                           value={"n": 3, "tags": ["a"]})))
    got = ok(await tool.run(call(operation="kv_get", bucket="cfg", key="greeting")))
    as_json = ok(await tool.run(call(operation="kv_get", bucket="cfg", key="limits.max")))
    keys = ok(await tool.run(call(operation="kv_keys", bucket="cfg")))
    filtered = ok(await tool.run(call(operation="kv_keys", bucket="cfg", key="limits.*")))
    deep = ok(await tool.run(call(operation="kv_keys", bucket="cfg", key="limits.>")))
    none = ok(await tool.run(call(operation="kv_keys", bucket="cfg", key="limits")))
    deleted = ok(await tool.run(call(operation="kv_delete", bucket="cfg", key="greeting")))
    after = ok(await tool.run(call(operation="kv_get", bucket="cfg", key="greeting")))

    assert put == {"status": "success", "bucket": "cfg", "key": "greeting", "revision": 1}
    assert got == {"status": "success", "bucket": "cfg", "key": "greeting", "value": "hello",
                   "encoding": "utf-8", "revision": 1}
    assert as_json["value"] == {"n": 3, "tags": ["a"]}
    assert keys == {"status": "success", "bucket": "cfg", "keys": ["greeting", "limits.max"],
                    "count": 2}
    assert filtered["keys"] == deep["keys"] == ["limits.max"]
    assert none["keys"] == []
    assert deleted == {"status": "success", "bucket": "cfg", "key": "greeting", "deleted": True}
    assert after == {"status": "not_found", "bucket": "cfg", "key": "greeting", "value": None}


async def test_kv_get_reads_json_text_as_its_value_and_a_missing_key_as_not_found(
        tool: NatsTool, nc: Client) -> None:
    kv = await nc.jetstream().key_value("cfg")
    await kv.put("session", b'{"user_id": 1, "active": true}')
    await kv.put("count", b"42")
    await kv.put("word", b"plain text")

    session = ok(await tool.run(call(operation="kv_get", bucket="cfg", key="session")))
    count = ok(await tool.run(call(operation="kv_get", bucket="cfg", key="count")))
    word = ok(await tool.run(call(operation="kv_get", bucket="cfg", key="word")))
    missing = ok(await tool.run(call(operation="kv_get", bucket="cfg", key="nobody")))

    assert session["status"] == "success" and session["value"] == {"user_id": 1, "active": True}
    assert count["value"] == 42 and word["value"] == "plain text"
    assert missing == {"status": "not_found", "bucket": "cfg", "key": "nobody", "value": None}


async def test_kv_get_of_binary_value_is_base64_with_a_flag(tool: NatsTool, nc: Client) -> None:
    kv = await nc.jetstream().key_value("cfg")
    await kv.put("blob", b"\xff\x00\xfe")

    got = ok(await tool.run(call(operation="kv_get", bucket="cfg", key="blob")))

    assert got["encoding"] == "base64"
    assert base64.b64decode(got["value"]) == b"\xff\x00\xfe"


async def test_kv_keys_of_an_empty_bucket_is_an_empty_list(tool: NatsTool) -> None:
    assert ok(await tool.run(call(operation="kv_keys", bucket="cfg"))) == {
        "status": "success", "bucket": "cfg", "keys": [], "count": 0}


async def test_object_put_then_get(tool: NatsTool) -> None:
    text = "line\n" * 50_000  # more than one chunk
    put = ok(await tool.run(call(operation="object_put", bucket="files", key="report.txt",
                                 value=text)))
    got = ok(await tool.run(call(operation="object_get", bucket="files", key="report.txt")))
    missing = await tool.run(call(operation="object_get", bucket="files", key="nope"))

    assert put["size"] == len(text) and put["digest"].startswith("SHA-256=")
    assert got["data"] == text and got["encoding"] == "utf-8" and got["size"] == len(text)
    assert got["digest"] == put["digest"]
    assert missing.error is not None and missing.error["kind"] == "not_found"


async def test_js_publish_then_get_msg_by_seq_and_by_subject(tool: NatsTool) -> None:
    first = ok(await tool.run(call(operation="js_publish", subject="orders.new", data={"id": 1})))
    second = ok(await tool.run(call(operation="js_publish", subject="orders.new", data="two",
                                    stream="ORDERS")))
    by_seq = ok(await tool.run(call(operation="js_get_msg", stream="ORDERS", seq=1)))
    last = ok(await tool.run(call(operation="js_get_msg", stream="ORDERS", subject="orders.new")))

    assert first == {"status": "success", "stream": "ORDERS", "seq": 1, "duplicate": False}
    assert second["seq"] == 2
    assert by_seq["data"] == '{"id":1}' and by_seq["subject"] == "orders.new"
    assert by_seq["encoding"] == "utf-8" and by_seq["time"]
    assert last["seq"] == 2 and last["data"] == "two"


async def test_js_publish_of_an_idempotent_task_is_deduplicated_by_its_key(tool: NatsTool) -> None:
    spec = {"idempotent": True}
    once = ok(await tool.run(call(spec, operation="js_publish", subject="orders.paid", data="x")))
    again = ok(await tool.run(call(spec, operation="js_publish", subject="orders.paid", data="x")))
    other = ok(await tool.run(call(spec, idem_key="e1.s.1:None:t:2", operation="js_publish",
                                   subject="orders.paid", data="x")))

    assert again == {"status": "success", "stream": "ORDERS", "seq": once["seq"], "duplicate": True}
    assert other["seq"] == once["seq"] + 1


async def test_missing_bucket_stream_and_message_are_not_found_errors(tool: NatsTool) -> None:
    outcomes = [
        await tool.run(call(operation="kv_get", bucket="absent", key="k")),
        await tool.run(call(operation="object_get", bucket="absent", key="k")),
        await tool.run(call(operation="js_get_msg", stream="ORDERS", seq=99)),
    ]

    for outcome in outcomes:
        assert outcome.error is not None and outcome.error["kind"] == "not_found", outcome.error


async def test_publish_to_a_subject_without_stream_is_a_nats_error(tool: NatsTool) -> None:
    outcome = await tool.run(call(operation="js_publish", subject="nowhere.x", data="x"))

    assert outcome.error is not None and outcome.error["kind"] == "nats"


async def test_bad_operation_and_missing_fields_are_config_errors(tool: NatsTool) -> None:
    outcomes = [
        await tool.run(call(operation="kv_scan", bucket="cfg")),
        await tool.run(call(operation="kv_put", bucket="cfg")),
        await tool.run(call(operation="js_get_msg", stream="ORDERS")),
        await tool.run(call(operation="js_get_msg", stream="ORDERS", seq="first")),
    ]

    for outcome in outcomes:
        assert outcome.error is not None and outcome.error["kind"] == "config", outcome.error
    assert "kv_get" in outcomes[0].error["message"]  # type: ignore[index]
    assert "key" in outcomes[1].error["message"]  # type: ignore[index]


async def test_js_publish_headers_that_are_not_a_mapping_are_a_config_error(tool: NatsTool) -> None:
    outcome = await tool.run(call(operation="js_publish", subject="orders.new", data="x",
                                  headers=["X-Tenant: acme"]))

    assert outcome.error is not None and outcome.error["kind"] == "config", outcome.error
    assert outcome.error["message"] == ("nats field headers must be a mapping of header -> value, "
                                        "not list")


async def test_auth_runs_the_operation_on_the_credentials_server(tmp_path: Path) -> None:
    async with run_nats_server(tmp_path / "other") as other:
        direct = await nats.connect(other.url)
        try:
            await direct.jetstream().create_key_value(bucket="remote")
            creds = Credentials(other_nats=Credential("other_nats", "generic", {"url": other.url}))
            tool = NatsTool(ToolServices(credentials=creds))  # no runtime connection at all

            put = await tool.run(call(operation="kv_put", bucket="remote", key="k", value="v",
                                      auth="other_nats"))
            unknown = await tool.run(call(operation="kv_get", bucket="remote", key="k",
                                          auth="nobody"))
            entry = await (await direct.jetstream().key_value("remote")).get("k")
        finally:
            await direct.close()

    assert put.ok, put.error
    assert entry.value == b"v"
    assert unknown.error is not None and unknown.error["kind"] == "auth"
    assert "nobody" in unknown.error["message"]


async def test_auth_to_an_unreachable_server_is_a_retryable_connection_error() -> None:
    from noetl_stream.bus.nats_server import free_port

    url = f"nats://127.0.0.1:{free_port()}"
    creds = Credentials(gone=Credential("gone", "generic", {"url": url}))

    outcome = await NatsTool(ToolServices(credentials=creds)).run(
        call(operation="kv_get", bucket="b", key="k", auth="gone"))

    assert outcome.error is not None
    assert outcome.error["kind"] == "connection" and outcome.error["retryable"] is True
    assert url not in outcome.error["message"]


async def test_kv_keys_pattern_is_noetls_name_for_the_key_filter(tool: NatsTool) -> None:
    ok(await tool.run(call(operation="kv_put", bucket="cfg", key="limits.max", value="1")))
    ok(await tool.run(call(operation="kv_put", bucket="cfg", key="other", value="2")))

    keys = ok(await tool.run(call(operation="kv_keys", bucket="cfg", pattern="limits.*")))

    assert keys == {"status": "success", "bucket": "cfg", "keys": ["limits.max"], "count": 1}


async def test_js_publish_headers_travel_with_the_message_beside_the_idempotency_key(
        tool: NatsTool) -> None:
    ok(await tool.run(call({"idempotent": True}, operation="js_publish", subject="orders.new",
                           data="x", headers={"X-Tenant": "acme", "X-Try": 2})))

    got = ok(await tool.run(call(operation="js_get_msg", stream="ORDERS", seq=1)))

    assert got["headers"]["X-Tenant"] == "acme" and got["headers"]["X-Try"] == "2"
    assert got["headers"]["Nats-Msg-Id"] == "e1.s.1:None:t:1"


async def test_auth_credential_with_noetls_nats_prefixed_fields_reaches_its_server(
        tmp_path: Path) -> None:
    async with run_nats_server(tmp_path / "other") as other:
        direct = await nats.connect(other.url)
        try:
            await direct.jetstream().create_key_value(bucket="remote")
            creds = Credentials(nats_e2e=Credential("nats_e2e", "generic",
                                                    {"nats_url": other.url}))
            tool = NatsTool(ToolServices(credentials=creds))

            put = await tool.run(call(operation="kv_put", bucket="remote", key="k", value="v",
                                      auth="nats_e2e"))
            entry = await (await direct.jetstream().key_value("remote")).get("k")
        finally:
            await direct.close()

    assert put.ok, put.error
    assert entry.value == b"v"


async def test_object_operations_read_noetls_name_and_data(tool: NatsTool) -> None:
    put = ok(await tool.run(call(operation="object_put", bucket="files", name="doc.json",
                                 data={"a": 1})))
    got = ok(await tool.run(call(operation="object_get", bucket="files", name="doc.json")))
    both = ok(await tool.run(call(operation="object_get", bucket="files", key="doc.json",
                                  name="a task label")))

    assert put["name"] == put["key"] == "doc.json" and put["size"] == len('{"a":1}')
    assert got["name"] == "doc.json" and got["data"] == '{"a":1}'
    assert both["data"] == '{"a":1}'  # `key` wins over `name`
