"""The NATS that the Kubernetes files deploy requires the users the Secrets name: the NATS
config the Helm values merge in is rendered as the chart writes it (JSON, `<< raw >>` written
raw), its passwords taken from the Secrets as the values' `secretKeyRef`s say, and run on a real
nats-server. Without a user nothing connects; each Secret's user and password connect; the
users and their grants are those of deploy/nats/accounts/accounts.conf. No Helm and no cluster:
only the part of the chart's config noetl-stream sets is rendered.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from ruamel.yaml import YAML

from nats_conf import dump, load
from noetl_stream.bus.nats_server import find_binary, free_port

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
VALUES = DEPLOY / "kubernetes" / "nats" / "values.yaml"
SECRETS = DEPLOY / "kubernetes" / "base" / "secrets.yaml"
ACCOUNTS = DEPLOY / "nats" / "accounts" / "accounts.conf"


def _yaml(path: Path) -> list[dict[str, Any]]:
    return [d for d in YAML(typ="safe").load_all(path.read_text()) if d]


def _secrets() -> dict[str, dict[str, str]]:
    return {d["metadata"]["name"]: d["stringData"] for d in _yaml(SECRETS) if d["kind"] == "Secret"}


def _nats_secrets() -> dict[str, dict[str, str]]:
    return {name: data for name, data in _secrets().items() if "NOETL_STREAM_NATS_USER" in data}


def _environment(values: dict[str, Any]) -> dict[str, str]:
    """The container's environment as Kubernetes sets it from the values' secretKeyRefs, each
    Secret given a password of its own so that a mix-up shows.
    """
    secrets = _nats_secrets()
    env: dict[str, str] = {}
    for name, spec in values["container"]["env"].items():
        ref = spec["valueFrom"]["secretKeyRef"]
        env[name] = f"{ref['name']}-{secrets[ref['name']][ref['key']]}-pw"
    return env


def _plain(value: Any) -> Any:
    """accounts.conf as the values write it: whole numbers as numbers, a `$VAR` and a size
    (`8G`) raw, since nats-server reads neither from a JSON string.
    """
    if isinstance(value, dict):
        return {k: (f"<< {v} >>" if k == "password" else _plain(v)) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, str) and re.fullmatch(r"\d+[KMGT]B?", value):
        return f"<< {value} >>"
    return int(value) if isinstance(value, str) and value.isdigit() else value


def test_the_helm_values_grant_what_accounts_conf_grants() -> None:
    (values,) = _yaml(VALUES)
    shipped = _plain(load(ACCOUNTS.read_text())["accounts"])
    assert values["config"]["merge"]["accounts"] == shipped


def test_every_nats_secret_names_a_user_the_helm_values_require() -> None:
    (values,) = _yaml(VALUES)
    users = {u["user"]: u["password"] for u in values["config"]["merge"]["accounts"]["NOETL"]["users"]}
    by_variable = {name: spec["valueFrom"]["secretKeyRef"]
                   for name, spec in values["container"]["env"].items()}
    named = {data["NOETL_STREAM_NATS_USER"]: secret for secret, data in _nats_secrets().items()}
    assert set(named) == set(users)
    for user, password in users.items():
        variable = password.removeprefix("<< $").removesuffix(" >>")
        assert by_variable[variable] == {"name": named[user], "key": "NOETL_STREAM_NATS_PASSWORD"}


@pytest.fixture
def helm_nats(tmp_path: Path) -> Iterator[tuple[str, dict[str, str]]]:
    (values,) = _yaml(VALUES)
    port = free_port()
    config = {"port": port, "jetstream": {"store_dir": str(tmp_path / "js")},
              **values["config"]["merge"]}
    conf = tmp_path / "nats.conf"
    conf.write_text(dump(config))
    env = {**os.environ, **_environment(values)}
    log = tmp_path / "nats.log"
    with log.open("w") as out:
        process = subprocess.Popen([str(find_binary()), "-c", str(conf)], env=env,
                                   stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 20
        while "Server is ready" not in log.read_text():
            assert process.poll() is None, log.read_text()
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.05)
        yield f"nats://127.0.0.1:{port}", env
    finally:
        process.terminate()
        process.wait(10)


async def _answer(url: str, user: str | None = None, password: str | None = None,
                  then: str = "") -> str:
    """What nats-server answers a client's CONNECT, `then` and PING (NATS's own protocol on a
    plain socket): "PONG" when all went through, else its first -ERR line.
    """
    host, port = url.removeprefix("nats://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        assert (await reader.readline()).startswith(b"INFO ")
        connect: dict[str, Any] = {"verbose": False, "pedantic": False, "protocol": 1}
        if user is not None:
            connect |= {"user": user, "pass": password}
        writer.write(f"CONNECT {json.dumps(connect)}\r\n{then}PING\r\n".encode())
        await writer.drain()
        return (await asyncio.wait_for(reader.readline(), 5)).decode().strip()
    finally:
        writer.close()
        await writer.wait_closed()


async def test_nats_refuses_a_connection_without_a_user(
        helm_nats: tuple[str, dict[str, str]]) -> None:
    url, _ = helm_nats
    assert await _answer(url) == "-ERR 'Authorization Violation'"


async def test_each_secrets_user_connects_with_its_password_only(
        helm_nats: tuple[str, dict[str, str]]) -> None:
    url, env = helm_nats
    (values,) = _yaml(VALUES)
    secrets = _nats_secrets()
    assert len(secrets) == 3
    for secret, data in secrets.items():
        variable = next(name for name, spec in values["container"]["env"].items()
                        if spec["valueFrom"]["secretKeyRef"]["name"] == secret)
        user = data["NOETL_STREAM_NATS_USER"]
        assert await _answer(url, user, env[variable]) == "PONG", secret
        assert await _answer(url, user, "wrong") == "-ERR 'Authorization Violation'"


async def test_a_workers_user_is_held_to_its_grants(helm_nats: tuple[str, dict[str, str]]) -> None:
    # The grants reach the running config: a worker may report an outcome, never send a command.
    url, env = helm_nats
    password = env["NOETL_WORKER_DEFAULT_PASSWORD"]
    assert await _answer(url, "worker-default", password,
                         "PUB noetl.events.e1.step.done.default 2\r\n{}\r\n") == "PONG"
    assert await _answer(url, "worker-default", password,
                         "PUB noetl.commands.default.x 2\r\n{}\r\n") == (
        "-ERR 'Permissions Violation for Publish to \"noetl.commands.default.x\"'")


COMPOSE = DEPLOY / "compose.yaml"
CLUSTER_USERS = DEPLOY / "nats" / "cluster" / "users.conf"
HOST_PASSWORDS = {"NOETL_SERVER_PASSWORD": "s-pw", "NOETL_WORKER_DEFAULT_PASSWORD": "w-pw",
                  "NOETL_CLIENT_PASSWORD": "c-pw"}


def _compose_services() -> dict[str, dict[str, Any]]:
    (compose,) = _yaml(COMPOSE)
    return dict(compose["services"])


def _from_host(value: str) -> str:
    """A compose value `${NAME:?...}` or `${NAME}` as the host's HOST_PASSWORDS fill it."""
    found = re.fullmatch(r"\$\{(\w+)(?::\?[^}]*)?\}", value)
    return HOST_PASSWORDS[found.group(1)] if found else value


def test_the_compose_clusters_users_are_accounts_confs() -> None:
    assert load(CLUSTER_USERS.read_text())["accounts"] == load(ACCOUNTS.read_text())["accounts"]
    assert "include users.conf" in (DEPLOY / "nats" / "cluster" / "container.conf").read_text()


def test_every_compose_nats_node_mounts_the_users_and_reads_every_password() -> None:
    for name, service in _compose_services().items():
        if "nats" in str(service.get("image", "")):
            assert "./nats/cluster/users.conf:/etc/nats/users.conf:ro" in service["volumes"], name
            assert set(HOST_PASSWORDS) <= set(service["environment"]), name


@pytest.fixture
def compose_nats(tmp_path: Path) -> Iterator[str]:
    """One node with the compose cluster's users (container.conf's routes and names aside)."""
    port = free_port()
    conf = tmp_path / "node.conf"
    (tmp_path / "users.conf").write_text(CLUSTER_USERS.read_text())  # included relative to conf
    conf.write_text(f"port: {port}\njetstream {{ store_dir: \"{tmp_path / 'js'}\" }}\n"
                    "include users.conf\n")
    log = tmp_path / "nats.log"
    with log.open("w") as out:
        process = subprocess.Popen([str(find_binary()), "-c", str(conf)],
                                   env={**os.environ, **HOST_PASSWORDS},
                                   stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 20
        while "Server is ready" not in log.read_text():
            assert process.poll() is None, log.read_text()
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.05)
        yield f"nats://127.0.0.1:{port}"
    finally:
        process.terminate()
        process.wait(10)


async def test_every_compose_process_logs_in_as_its_role(compose_nats: str) -> None:
    assert await _answer(compose_nats) == "-ERR 'Authorization Violation'"
    roles: dict[str, str] = {}
    for name, service in _compose_services().items():
        env = service.get("environment") or {}
        if "NOETL_STREAM_NATS_URL" in env:
            user, password = env["NOETL_STREAM_NATS_USER"], _from_host(env["NOETL_STREAM_NATS_PASSWORD"])
            assert await _answer(compose_nats, user, password) == "PONG", name
            roles[name] = user
    assert {r for n, r in roles.items() if n.startswith("worker")} == {"worker-default"}
    assert {r for n, r in roles.items() if not n.startswith("worker")} == {"server"}
