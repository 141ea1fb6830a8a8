"""deploy/nats/accounts/accounts.conf, as shipped, on a real nats-server: each role can do its job
and nothing that would let it fake another role's messages."""

from __future__ import annotations

import asyncio
import logging
import re
import subprocess
from collections.abc import AsyncIterator
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

import pytest
from nats.aio.msg import Msg
from nats.errors import TimeoutError as NatsTimeoutError
from nats.js.api import ConsumerConfig
from nats.js.errors import NotFoundError

from noetl_stream import config, jsonutil
from noetl_stream.bus.connection import Bus, connect
from noetl_stream.bus.event_feed import EventFeed
from noetl_stream.bus.nats_server import free_port
from noetl_stream.bus.provision import provision
from noetl_stream.bus.publish import COPY_HEADER, publish_event
from noetl_stream.bus.signals import publish_signal
from noetl_stream.credentials import CredentialScope
from noetl_stream.dsl.composition import load_with_children
from noetl_stream.errors import InfrastructureError
from noetl_stream.services import run_services, submit_and_watch
from noetl_stream.state.catalog import register_files
from noetl_stream.state.credentials import CredentialStore
from noetl_stream.state.crypto import SecretBox
from noetl_stream.state.results import ResultStore
from noetl_stream.testing.cluster import render_node_config, start_node, stop_node
from noetl_stream.testing.events import stored_messages
from noetl_stream.testing.waiting import assert_eventually
from noetl_stream.worker.outcome_lookup import AttemptOutcome, outcome_stored
from noetl_stream.worker.start_scan import Scan, first_start, start_at
from playbook_files import fill, read_playbook

pytestmark = pytest.mark.integration

ACCOUNTS_CONF = Path(__file__).resolve().parents[2] / "deploy" / "nats" / "accounts" / "accounts.conf"
PASSWORDS = {"server": "server-secret", "worker-default": "worker-secret", "client": "client-secret",
             "worker-secure": "secure-worker-secret"}
ENV = {"NOETL_SERVER_PASSWORD": PASSWORDS["server"],
       "NOETL_WORKER_DEFAULT_PASSWORD": PASSWORDS["worker-default"],
       "NOETL_WORKER_SECURE_PASSWORD": PASSWORDS["worker-secure"],
       "NOETL_CLIENT_PASSWORD": PASSWORDS["client"]}
DENIED_WAIT_S = 1.0  # a denied JetStream publish gets no ack; no need to wait the default 10 s


class Accounts:
    def __init__(self, port: int) -> None:
        self.port = port

    def url(self, user: str, password: str | None = None) -> str:
        return f"nats://{user}:{password or PASSWORDS[user]}@127.0.0.1:{self.port}"

    async def connect(self, user: str) -> Bus:
        return await connect(self.url(user), name=f"test-{user}")


def with_pool_user(text: str, pool: str) -> str:
    """The config with a worker user for `pool`, made from `worker-default` the way
    deploy/nats/accounts/README.md says ("Adding a pool").
    """
    found = re.search(r"(?ms)^      \{\n        user: worker-default\n.*?^      \}\n", text)
    assert found, "no worker-default user in the shipped config"
    block = found.group(0)
    for old, new in (("worker-default", f"worker-{pool}"),
                     ("NOETL_WORKER_DEFAULT_PASSWORD", f"NOETL_WORKER_{pool.upper()}_PASSWORD"),
                     ("noetl-workers-default", f"noetl-workers-{pool}"),
                     ("noetl.dlq.commands.default", f"noetl.dlq.commands.{pool}"),
                     ("worker.default", f"worker.{pool}"), ('.default"', f'.{pool}"')):
        block = block.replace(old, new)
    return text[:found.end()] + "\n" + block + text[found.end():]


@pytest.fixture
async def accounts(tmp_path: Path) -> AsyncIterator[Accounts]:
    """The shipped config with only its ports and store folder moved, and a second pool's
    worker (`worker-secure`) added as its README says; passwords from the env.
    """
    port, process = await _start_accounts(tmp_path)
    try:
        server = await connect(f"nats://server:{PASSWORDS['server']}@127.0.0.1:{port}")
        try:
            await provision(server)
        finally:
            await server.close()
        yield Accounts(port)
    finally:
        stop_node(process)


async def _start_accounts(tmp_path: Path) -> tuple[int, subprocess.Popen[bytes]]:
    """nats-server on the shipped config, listening; ports are drawn again when another test
    process took one between the draw and the bind (tests run in parallel).
    """
    for attempt in range(3):
        port, monitor = free_port(), free_port()
        text = re.sub(r"(?m)^listen:\s*\S+", f"listen: 127.0.0.1:{port}",
                      with_pool_user(ACCOUNTS_CONF.read_text(), "secure"))
        text = render_node_config(text, ports={8222: monitor}, store_dir=tmp_path / "jetstream")
        conf = tmp_path / "accounts.conf"
        conf.write_text(text)
        log = tmp_path / f"nats-server-{attempt}.log"
        process = start_node(conf, log, env=ENV)
        try:
            await assert_eventually(partial(_listening, process, port, log))
            return port, process
        except AssertionError:
            stop_node(process)
            if "address already in use" not in log.read_text():
                raise
    raise AssertionError("no free port for nats-server after three draws")


async def _listening(process: subprocess.Popen[bytes], port: int, log: Path) -> None:
    assert process.poll() is None, log.read_text()
    try:
        _, writer = await asyncio.open_connection("127.0.0.1", port)
    except OSError as exc:
        raise AssertionError(f"port {port} not open yet") from exc
    writer.close()
    await writer.wait_closed()


@pytest.fixture
async def server_bus(accounts: Accounts) -> AsyncIterator[Bus]:
    bus = await accounts.connect("server")
    yield bus
    await bus.close()


@pytest.fixture
async def worker_bus(accounts: Accounts) -> AsyncIterator[Bus]:
    bus = await accounts.connect("worker-default")
    yield bus
    await bus.close()


@pytest.fixture
async def client_bus(accounts: Accounts) -> AsyncIterator[Bus]:
    bus = await accounts.connect("client")
    yield bus
    await bus.close()


async def _stored(bus: Bus, stream: str, subject: str) -> int:
    info = await bus.js.stream_info(stream, subjects_filter=subject)
    return int((info.state.subjects or {}).get(subject, 0))


T = TypeVar("T")


def _reported(found: list[T]) -> list[T]:
    # An AssertionError, so assert_eventually waits for the server's -ERR instead of giving up.
    assert found, "nats-server has reported no permissions violation for it yet"
    return found


def _violations(caplog: pytest.LogCaptureFixture, subject: str) -> list[str]:
    # nats-py reports the server's -ERR lowercased.
    return [r.getMessage() for r in caplog.records
            if "permissions violation" in r.getMessage().lower()
            and f'"{subject.lower()}"' in r.getMessage().lower()]


async def test_worker_cannot_publish_a_command(worker_bus: Bus, server_bus: Bus,
                                               caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="noetl_stream.connection")
    subject = "noetl.commands.default.python"

    with pytest.raises(NatsTimeoutError):
        await worker_bus.js.publish(subject, b"{}", timeout=DENIED_WAIT_S)

    assert await _stored(server_bus, "NOETL_COMMANDS", subject) == 0
    await assert_eventually(lambda: _reported(_violations(caplog, subject)))


async def test_client_cannot_publish_a_step_outcome(client_bus: Bus, server_bus: Bus,
                                                    caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="noetl_stream.connection")
    subject = "noetl.events.ex1.step.done.default"

    with pytest.raises(NatsTimeoutError):
        await client_bus.js.publish(subject, b'{"status": "ok"}', timeout=DENIED_WAIT_S)

    assert await _stored(server_bus, "NOETL_EVENTS", subject) == 0
    await assert_eventually(lambda: _reported(_violations(caplog, subject)))


async def test_client_can_request_an_execution_cancel_it_and_signal_it(client_bus: Bus) -> None:
    ack = await client_bus.js.publish("noetl.requests.execute", b"{}")
    cancel = await client_bus.js.publish("noetl.requests.cancel", b"{}")
    seq = await publish_signal(client_bus, "ex1", "approve", {"ok": True})

    assert (ack.stream, cancel.stream) == ("NOETL_REQUESTS", "NOETL_REQUESTS")
    assert seq > 0


async def test_worker_fetches_its_pool_commands_and_reports_the_outcome(
        worker_bus: Bus, server_bus: Bus) -> None:
    await server_bus.js.publish("noetl.commands.default.python", b'{"n": 1}')
    decl = worker_bus.topology.pool_consumer("default")

    sub = await worker_bus.js.pull_subscribe_bind(decl.durable, stream=decl.stream)
    [msg] = await sub.fetch(1, timeout=5)
    await publish_event(worker_bus, "ex1", "step.done", "ex1:step.done:s1",
                        {"event_type": "step.done", "execution_id": "ex1", "status": "ok"},
                        pool="default")
    await msg.ack_sync()

    assert jsonutil.loads(msg.data) == {"n": 1}
    assert await _stored(server_bus, "NOETL_EVENTS", "noetl.events.ex1.step.done.default") == 1


async def test_worker_finds_a_stored_outcome_of_its_pool(worker_bus: Bus) -> None:
    """What a redelivered command asks before it runs again (worker/outcome_lookup.py): the
    worker's user may read its outcomes back."""
    attempt = AttemptOutcome("ex2", "ex2.s1.1", None, "default")
    assert not await outcome_stored(worker_bus, attempt, None)
    await publish_event(worker_bus, "ex2", "step.failed", "evt:ex2:step.failed:ex2.s1.1:-",
                        {"event_type": "step.failed", "execution_id": "ex2", "status": "error"},
                        pool="default")
    assert await outcome_stored(worker_bus, attempt, None)
    assert not await outcome_stored(
        worker_bus, AttemptOutcome("ex2", "ex2.s1.2", None, "default"), None)


async def test_worker_reads_back_the_start_of_an_attempt(worker_bus: Bus) -> None:
    """What a delivery that may follow an earlier start asks before it runs
    (worker/attempt_claims.py): the worker's user may store a start and read it back, from a
    time or from the sequence a duplicate's ack names."""
    msg_id = "evt:ex3:task.started:ex3.s1.1:-"
    scan = Scan("ex3", msg_id)
    assert await first_start(worker_bus, scan) is None
    stored = await worker_bus.stored.store(
        "noetl.events.ex3.task.started", b'{"event_type": "task.started"}',
        {"Nats-Msg-Id": msg_id, COPY_HEADER: "publish:a1"})
    again = await worker_bus.stored.store(
        "noetl.events.ex3.task.started", b'{"event_type": "task.started"}',
        {"Nats-Msg-Id": msg_id, COPY_HEADER: "publish:b2"})
    assert (stored.duplicate, again) == (False, (stored.seq, True))
    found = await first_start(worker_bus, scan)
    at = await start_at(worker_bus, "ex3", msg_id, again.seq)
    assert found is not None and at is not None
    assert (found.copy, found.seq, at.copy) == ("publish:a1", stored.seq, "publish:a1")


async def test_worker_and_client_start_on_a_provisioned_topology(worker_bus: Bus,
                                                                 client_bus: Bus) -> None:
    # What `noetl-stream worker` and `run --nats-url` do at start: read-only checks pass.
    for bus in (worker_bus, client_bus):
        report = await provision(bus)
        assert report.created == [] and report.drift == []


async def test_wrong_password_is_reported_as_refused_credentials(accounts: Accounts) -> None:
    with pytest.raises(InfrastructureError, match="refused our credentials") as info:
        await connect(accounts.url("worker-default", "not-the-password"))

    assert "not-the-password" not in str(info.value)


HELLO = read_playbook("integration", "nats_accounts_hello.yaml")


async def test_playbook_runs_with_each_role_on_its_own_user(
        server_bus: Bus, worker_bus: Bus, client_bus: Bus, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="noetl_stream.connection")
    async with run_services(server_bus, worker=False), \
            run_services(worker_bus, server=False, python_children=1):
        final = await submit_and_watch(client_bus, playbook_text=HELLO,
                                       playbook_file="accounts_hello.yaml", payload={},
                                       on_event=lambda _: None, timeout_s=60)

    assert final["event_type"] == "execution.completed", final
    assert final["result"] == {"text": "HELLO WORLD"}
    assert [r.getMessage() for r in caplog.records if "violation" in r.getMessage().lower()] == []


@pytest.mark.parametrize("user", ["client", "worker-default"])
async def test_restricted_user_cannot_create_or_update_the_router_consumer(
        accounts: Accounts, server_bus: Bus, user: str, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="noetl_stream.connection")
    router = server_bus.topology.router_decl().consumer(0)
    before = (await server_bus.js.consumer_info(router.stream, router.durable)).config
    # A change the server would accept as an update of the router's durable.
    hijack = {**before.as_dict(), "description": "hijacked", "max_ack_pending": 1}
    body = jsonutil.dumps({"stream_name": router.stream, "config": hijack})
    legacy = f"$JS.API.CONSUMER.CREATE.{router.stream}"
    durable = f"$JS.API.CONSUMER.DURABLE.CREATE.{router.stream}.{router.durable}"
    bus = await accounts.connect(user)
    try:
        # The named form: nats-py puts the name (and filter) in the subject, which the grant denies.
        with pytest.raises(NatsTimeoutError):
            await bus.js.add_consumer(router.stream, ConsumerConfig.from_response(hijack),
                                      timeout=DENIED_WAIT_S)
        # The unnamed and the durable forms, with the router's name only in the body.
        for subject in (legacy, durable):
            with pytest.raises(NatsTimeoutError):
                await bus.nc.request(subject, body, timeout=DENIED_WAIT_S)
        # What the user may do: a consumer of its own name, through the named form.
        async with EventFeed(bus.nc, "noetl.events.ex1.>") as feed:
            assert feed.consumer_name is not None
    finally:
        await bus.close()

    after = (await server_bus.js.consumer_info(router.stream, router.durable)).config
    assert after == before
    named = (f"$JS.API.CONSUMER.CREATE.{router.stream}.{router.durable}."
             f"{before.filter_subject or ''}").rstrip(".")
    for subject in (named, legacy, durable):
        await assert_eventually(lambda s=subject: _reported(_violations(caplog, s)))


CHILD = read_playbook("integration", "nats_accounts_child.yaml")

PARENT = read_playbook("integration", "nats_accounts_parent.yaml")


async def test_sub_playbook_waits_for_its_child_with_each_role_on_its_own_user(
        server_bus: Bus, worker_bus: Bus, client_bus: Bus, tmp_path: Path,
        caplog: pytest.LogCaptureFixture) -> None:
    # The worker follows the child's events on its own user's grants (tools/playbook.py).
    caplog.set_level(logging.WARNING, logger="noetl_stream.connection")
    (tmp_path / "child.yaml").write_text(CHILD)
    (tmp_path / "parent.yaml").write_text(PARENT)
    composed = load_with_children(tmp_path / "parent.yaml")
    await register_files(server_bus.js, composed.files)  # the catalog is the server's to write
    async with run_services(server_bus, worker=False), \
            run_services(worker_bus, server=False, python_children=1):
        final = await submit_and_watch(client_bus, playbook_text=composed.files[0].text,
                                       playbook_file="parent.yaml", payload={"n": 4},
                                       on_event=lambda _: None, timeout_s=60)

    assert final["event_type"] == "execution.completed", final
    assert final["result"] == {"square": 16}
    assert [r.getMessage() for r in caplog.records if "violation" in r.getMessage().lower()] == []


# -- least privilege: what each user may no longer do (docs/security.md) ------------------------


async def test_each_user_replies_on_its_own_inbox_and_cannot_read_anothers(
        accounts: Accounts, server_bus: Bus, worker_bus: Bus, client_bus: Bus,
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="noetl_stream.connection")
    box = SecretBox.from_env(config.home_dir())
    store = await CredentialStore.open(server_bus.js, box)
    await store.set("prod_db", "basic", {"username": "etl", "password": "pw-in-a-reply"})
    overheard: list[bytes] = []

    async def overhear(msg: Msg) -> None:
        overheard.append(msg.data)

    for pattern in ("_INBOX.>", "_INBOX.worker-default.>", "_INBOX.server.>"):
        await client_bus.nc.subscribe(pattern, cb=overhear)
    await client_bus.nc.flush()
    # The worker reads the credential: JetStream answers on the worker's own inbox.
    kv = await worker_bus.js.key_value("noetl_credentials")
    got = await kv.get("prod_db")

    assert got.value is not None and bytes(worker_bus.nc._inbox_prefix) == b"_INBOX.worker-default"
    assert bytes(client_bus.nc._inbox_prefix) == b"_INBOX.client"
    await asyncio.sleep(0.3)
    assert overheard == []
    for pattern in ("_INBOX.>", "_INBOX.worker-default.>", "_INBOX.server.>"):
        await assert_eventually(lambda p=pattern: _reported([
            r for r in caplog.records if "permissions violation for subscription" in
            r.getMessage().lower() and f'"{p.lower()}"' in r.getMessage().lower()]))


@pytest.mark.parametrize("bucket", ["noetl_credentials", "noetl_users", "noetl_executions"])
async def test_client_cannot_list_a_buckets_keys(client_bus: Bus, server_bus: Bus,
                                                 bucket: str) -> None:
    kv = await server_bus.js.key_value(bucket)
    await kv.put("secret_name_1", b"{}")
    filtered = jsonutil.dumps({"subjects_filter": ">"})

    with pytest.raises(NatsTimeoutError):
        await client_bus.nc.request(f"$JS.API.STREAM.INFO.KV_{bucket}", filtered,
                                    timeout=DENIED_WAIT_S)
    # What it checks the topology with instead: the stream list, which names no keys (and
    # takes no subject filter).
    listing = await client_bus.nc.request("$JS.API.STREAM.LIST", b"{}", timeout=5)
    assert b"KV_" + bucket.encode() in listing.data
    assert b"secret_name_1" not in listing.data


async def test_client_cannot_ack_event_deliveries(client_bus: Bus,
                                                  caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="noetl_stream.connection")
    subject = "$JS.ACK.NOETL_EVENTS.watch_x.1.1.1.1.1.0"

    await client_bus.nc.publish(subject, b"+ACK")
    await client_bus.nc.flush()

    await assert_eventually(lambda: _reported(_violations(caplog, subject)))


@pytest.mark.parametrize("user", ["client", "worker-default"])
async def test_restricted_user_cannot_take_the_admission_services_messages(
        accounts: Accounts, server_bus: Bus, user: str, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="noetl_stream.connection")
    admission = server_bus.topology.consumer("noetl-server-admission")
    pull = f"$JS.API.CONSUMER.MSG.NEXT.{admission.stream}.{admission.durable}"
    bus = await accounts.connect(user)
    try:
        # Taking (and so acknowledging away) a slot request, or rewriting the durable, is denied.
        with pytest.raises(NatsTimeoutError):
            await bus.nc.request(pull, b'{"batch": 1, "expires": 100000000}',
                                 timeout=DENIED_WAIT_S)
        with pytest.raises(NatsTimeoutError):
            await bus.js.add_consumer(admission.stream, ConsumerConfig(
                durable_name=admission.durable, filter_subject="noetl.events.>"),
                timeout=DENIED_WAIT_S)
    finally:
        await bus.close()
    await assert_eventually(lambda: _reported(_violations(caplog, pull)))


async def test_worker_cannot_purge_the_results_store_or_write_other_auth_cache_keys(
        worker_bus: Bus, server_bus: Bus, client_bus: Bus,
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="noetl_stream.connection")
    # What it does: store a large result (chunks, then metadata) that a client reads back.
    ref = await ResultStore(worker_bus.js).put_bytes(b"x" * 300_000)
    assert await ResultStore(client_bus.js).fetch(ref["$ref"]) == b"x" * 300_000
    purge = "$JS.API.STREAM.PURGE.OBJ_noetl_results"
    with pytest.raises(NatsTimeoutError):
        await worker_bus.nc.request(purge, b"", timeout=DENIED_WAIT_S)
    stray = "$KV.noetl_auth_cache.other_key"
    with pytest.raises(NatsTimeoutError):
        await worker_bus.js.publish(stray, b"{}", timeout=DENIED_WAIT_S)

    assert (await server_bus.js.stream_info("OBJ_noetl_results")).state.messages > 0
    assert await ResultStore(client_bus.js).fetch(ref["$ref"]) == b"x" * 300_000
    for subject in (purge, stray):
        await assert_eventually(lambda s=subject: _reported(_violations(caplog, s)))


SCOPED = read_playbook("integration", "nats_accounts_scoped.yaml")


async def test_a_credential_is_used_only_by_the_playbooks_its_scope_names(
        server_bus: Bus, worker_bus: Bus, client_bus: Bus,
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="noetl_stream.connection")
    box = SecretBox.from_env(config.home_dir())
    store = await CredentialStore.open(server_bus.js, box)
    await store.set("prod_db", "basic", {"username": "etl", "password": "pw"},
                    scope=CredentialScope(playbooks=["reports/*"]))
    finals = {}
    async with run_services(server_bus, worker=False), \
            run_services(worker_bus, server=False, python_children=1):
        for path in ("reports/daily", "sandbox/exfiltrate"):
            finals[path] = await submit_and_watch(
                client_bus, playbook_text=fill(SCOPED, name=path.replace("/", "_"), path=path),
                playbook_file="scoped.yaml", payload={}, on_event=lambda _: None, timeout_s=60)

    allowed, refused = finals["reports/daily"], finals["sandbox/exfiltrate"]
    assert allowed["event_type"] == "execution.completed", allowed
    assert allowed["result"] == {"user": "etl"}
    assert refused["event_type"] == "execution.failed", refused
    assert 'may not be used by playbook \\"sandbox/exfiltrate\\"' in \
        jsonutil.dumps(refused).decode()
    uses = {}
    for final in (allowed, refused):
        stored = await stored_messages(
            server_bus.js, f"noetl.events.{final['execution_id']}.credential.used")
        events = [jsonutil.loads(data) for _, data in stored]
        uses[final["execution_id"]] = [(e["credential"], e["playbook"], e["granted"])
                                       for e in events]
    assert uses[allowed["execution_id"]] == [("prod_db", "reports/daily", True)]
    assert uses[refused["execution_id"]] == [("prod_db", "sandbox/exfiltrate", False)]
    assert [r.getMessage() for r in caplog.records if "violation" in r.getMessage().lower()] == []


SECURE = read_playbook("integration", "nats_accounts_secure_pool.yaml")


async def finish_on_secure(accounts: Accounts, waiting: asyncio.Task[dict[str, Any]],
                           timeout_s: float) -> dict[str, Any]:
    """Start pool secure's own worker, under its own user, and wait for the execution's end."""
    secure_bus = await accounts.connect("worker-secure")
    try:
        async with run_services(secure_bus, server=False, pool="secure", python_children=1):
            return await asyncio.wait_for(waiting, timeout_s)
    finally:
        await secure_bus.close()


async def test_a_worker_cannot_answer_a_command_sent_to_another_pool(
        accounts: Accounts, server_bus: Bus, worker_bus: Bus, client_bus: Bus,
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="noetl_stream.connection")
    caplog.set_level(logging.WARNING, logger="noetl_stream.server")
    await provision(server_bus, pools=("default", "secure"))
    async with run_services(server_bus, worker=False):
        waiting = asyncio.create_task(submit_and_watch(
            client_bus, playbook_text=SECURE, playbook_file="secure_pool.yaml", payload={},
            on_event=lambda _: None, timeout_s=90))

        async def sent() -> dict[str, object]:
            try:
                msg = await server_bus.js.get_last_msg("NOETL_COMMANDS",
                                                       "noetl.commands.secure.python")
            except NotFoundError as exc:
                raise AssertionError("no command for pool secure yet") from exc
            body: dict[str, object] = jsonutil.loads(msg.data)
            return body

        command = await assert_eventually(sent, timeout_s=30)
        eid, run = str(command["execution_id"]), str(command["step_run_id"])
        forged = jsonutil.dumps({"event_type": "step.done", "execution_id": eid, "step": "start",
                                 "step_run_id": run, "iteration": None, "status": "ok",
                                 "result": {"from": "forged"}, "error": None, "ctx_patch": {}})
        # Another pool's outcome subject, or one naming no pool: NATS refuses both.
        for subject in (f"noetl.events.{eid}.step.done.secure", f"noetl.events.{eid}.step.done"):
            with pytest.raises(NatsTimeoutError):
                await worker_bus.js.publish(subject, forged, timeout=DENIED_WAIT_S)
            assert await _stored(server_bus, "NOETL_EVENTS", subject) == 0
            await assert_eventually(lambda s=subject: _reported(_violations(caplog, s)))
        # Its own pool's subject is its to publish, but the router does not take it for a
        # command it sent to another pool.
        await worker_bus.js.publish(f"noetl.events.{eid}.step.done.default", forged,
                                    headers={"Nats-Msg-Id": f"forged:{run}"})
        await asyncio.sleep(3)
        assert not waiting.done(), waiting.result()
        assert any("from pool 'default' dropped: its command went to pool 'secure'"
                   in r.getMessage() for r in caplog.records), "the server said nothing"

        final = await finish_on_secure(accounts, waiting, 60)
    assert final["event_type"] == "execution.completed", final
    assert final["result"] == {"from": "secure"}
