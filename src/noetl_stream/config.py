"""Settings read from the environment and flags, validated once at start-up."""

from __future__ import annotations

import os
from pathlib import Path

from noetl_stream.errors import InfrastructureError

ENV_HOME = "NOETL_STREAM_HOME"
ENV_NATS_URL = "NOETL_STREAM_NATS_URL"
ENV_PREFIX = "NOETL_STREAM_PREFIX"
# A running system's HTTP API, and the session token or API key for it: CLI commands given a
# server talk to it instead of NATS (cli/remote.py).
ENV_SERVER = "NOETL_STREAM_SERVER"
ENV_TOKEN = "NOETL_STREAM_TOKEN"
# Lease of a command on a worker (JetStream AckWait of the pool consumers) and how many deliveries
# a command gets before it is dead-lettered. Read when the topology is first loaded; the values
# are provisioned, so a running stack reports a change as drift.
ENV_COMMAND_ACK_WAIT_S = "NOETL_STREAM_COMMAND_ACK_WAIT_S"
ENV_COMMAND_MAX_DELIVER = "NOETL_STREAM_COMMAND_MAX_DELIVER"
# How long the server's consumers (execution requests, router events) wait for an ack before
# redelivering: what a server killed mid-batch costs in recovery time. Provisioned like the lease.
ENV_ROUTER_ACK_WAIT_S = "NOETL_STREAM_ROUTER_ACK_WAIT_S"


# Node bits (0..1023) of the execution ids this process issues (server/execution_ids.py). Unset:
# a random node per process.
ENV_NODE_ID = "NOETL_STREAM_NODE_ID"


def node_id_from_env() -> int | None:
    raw = os.environ.get(ENV_NODE_ID, "").strip()
    if not raw:
        return None
    if not raw.isdigit() or int(raw) > 1023:
        raise InfrastructureError(f'{ENV_NODE_ID}="{raw}": a whole number from 0 to 1023')
    return int(raw)


def home_dir() -> Path:
    raw = os.environ.get(ENV_HOME)
    path = Path(raw).expanduser() if raw else Path.home() / ".local" / "share" / "noetl-stream"
    path.mkdir(parents=True, exist_ok=True)
    return path


def nats_url_from_env() -> str | None:
    return os.environ.get(ENV_NATS_URL) or None


# NATS credentials of this process's role (deploy/nats/accounts): user and password, a creds file
# (JWT + nkey), or a token. Credentials in the URL itself (nats://user:pass@host) take precedence.
ENV_NATS_USER = "NOETL_STREAM_NATS_USER"
ENV_NATS_PASSWORD = "NOETL_STREAM_NATS_PASSWORD"
ENV_NATS_CREDS = "NOETL_STREAM_NATS_CREDS"
ENV_NATS_TOKEN = "NOETL_STREAM_NATS_TOKEN"
# JetStream replicas of streams, KV buckets and object stores at provisioning (3 in a cluster).
ENV_REPLICAS = "NOETL_STREAM_REPLICAS"


def nats_auth_from_env() -> dict[str, str]:
    """nats-py `connect` options for the credentials set in the environment (may be empty)."""
    options: dict[str, str] = {}
    user, password = os.environ.get(ENV_NATS_USER), os.environ.get(ENV_NATS_PASSWORD)
    if user:
        options["user"] = user
        options["password"] = password or ""
    if creds := os.environ.get(ENV_NATS_CREDS):
        options["user_credentials"] = str(Path(creds).expanduser())
    if token := os.environ.get(ENV_NATS_TOKEN):
        options["token"] = token
    return options


def replicas_from_env() -> int | None:
    raw = os.environ.get(ENV_REPLICAS)
    return int(raw) if raw else None


def subject_prefix() -> str:
    return os.environ.get(ENV_PREFIX, "noetl")


def command_lease_overrides() -> tuple[float | None, int | None]:
    """(ack_wait_s, max_deliver) for worker pool consumers, when set in the environment."""
    ack_wait = os.environ.get(ENV_COMMAND_ACK_WAIT_S)
    max_deliver = os.environ.get(ENV_COMMAND_MAX_DELIVER)
    return (float(ack_wait) if ack_wait else None, int(max_deliver) if max_deliver else None)


def router_ack_wait_override() -> float | None:
    """AckWait of the server's request and router consumers, when set in the environment."""
    raw = os.environ.get(ENV_ROUTER_ACK_WAIT_S)
    return float(raw) if raw else None


# How long a finished execution is kept after it finished (a duration: `30d`, `12h`, `90m`,
# `3600s`, or seconds; at least 1 s). Read by the server's retention sweep, which purges finished
# executions by subject and key (server/retention.py); nothing running ever ages out.
ENV_RETENTION = "NOETL_STREAM_RETENTION"
DEFAULT_RETENTION_S = 30 * 86400.0
_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 7 * 86400.0}


def parse_age(text: str) -> float:
    """Seconds in `7d`, `12h`, `30m`, `45s`, `2w` or a bare number of seconds; ValueError else."""
    raw = text.strip().lower()
    number, unit = (raw[:-1], raw[-1]) if raw and raw[-1] in _UNITS else (raw, "s")
    try:
        value = float(number)
    except ValueError:
        raise ValueError(f"{text!r} is not an age: a number with s, m, h, d or w (7d, 12h)") from None
    if value < 0 or value != value:
        raise ValueError(f"{text!r}: an age is zero or more")
    return value * _UNITS[unit]


# What the streams and the results store may hold together, in bytes (`8GiB`, `512MiB`, or a
# number): each gets its share (subjects/topology.yaml `store_share`) as its `max_bytes`. 0: no
# byte limits. JetStream reserves these bytes in its store when a stream is created, so the budget
# must fit in the store (max_file_store, or 75% of the free disk when unset).
ENV_STORE_BYTES = "NOETL_STREAM_STORE_BYTES"
DEFAULT_STORE_BYTES = 4 * 1024**3
_BYTE_UNITS = {"kib": 1024, "mib": 1024**2, "gib": 1024**3, "tib": 1024**4,
               "kb": 1000, "mb": 1000**2, "gb": 1000**3, "tb": 1000**4, "b": 1}


def store_bytes() -> int:
    raw = os.environ.get(ENV_STORE_BYTES, "").strip()
    if not raw:
        return DEFAULT_STORE_BYTES
    text = raw.lower()
    unit = next((u for u in _BYTE_UNITS if text.endswith(u)), "b")
    number = text[: len(text) - len(unit)] if text.endswith(unit) else text
    try:
        value = float(number) * _BYTE_UNITS[unit]
    except ValueError:
        value = -1.0
    if value < 0 or value != value:
        raise InfrastructureError(f'{ENV_STORE_BYTES}="{raw}": a number of bytes, 0 or more, '
                                  "optionally with KiB, MiB, GiB (8GiB, 512MiB)")
    return int(value)


def retention_s() -> float:
    return _duration(ENV_RETENTION, DEFAULT_RETENTION_S)


# NoETL's workers redact secret-named fields and secret-shaped texts in what a step stores
# (worker/redact.py). Off by default: a result is stored as the tool returned it, which a
# playbook that echoes a header it sent relies on; credential values read through the keychain
# or the secrets tool are masked either way.
ENV_REDACT_RESULTS = "NOETL_STREAM_REDACT_RESULTS"


def redact_results() -> bool:
    """Whether workers redact step results as NoETL's do (NOETL_STREAM_REDACT_RESULTS=1)."""
    return os.environ.get(ENV_REDACT_RESULTS, "").strip().lower() in ("1", "true", "yes", "on")


# The duplicate window of the streams publishers write to (requests, commands, events, dead
# letters): how long JetStream remembers a `Nats-Msg-Id`. A duration like the retention, from 1 s
# up; 20 minutes by default. It never exceeds a stream's max age (subjects.py caps it there), and
# nothing that could run twice depends on it (docs/reliability.md, "Settings").
ENV_DUPLICATE_WINDOW = "NOETL_STREAM_DUPLICATE_WINDOW"
DEFAULT_DUPLICATE_WINDOW_S = 1200.0


def duplicate_window_s() -> float:
    return _duration(ENV_DUPLICATE_WINDOW, DEFAULT_DUPLICATE_WINDOW_S)


def _duration(name: str, default: float) -> float:
    """A duration setting of at least one second; `default` when unset."""
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = parse_age(raw)
    except ValueError as exc:
        raise InfrastructureError(f"{name}: {exc}") from None
    if value < 1:
        raise InfrastructureError(f'{name}="{raw}": at least one second (1s)')
    return value
