"""Settings read from the environment and flags, validated once at start-up."""

from __future__ import annotations

import os
from pathlib import Path

ENV_HOME = "NOETL_STREAM_HOME"
ENV_NATS_URL = "NOETL_STREAM_NATS_URL"
ENV_PREFIX = "NOETL_STREAM_PREFIX"
# Lease of a command on a worker (JetStream AckWait of the pool consumers) and how many deliveries
# a command gets before it is dead-lettered. Read when the topology is first loaded; the values
# are provisioned, so a running stack reports a change as drift.
ENV_COMMAND_ACK_WAIT_S = "NOETL_STREAM_COMMAND_ACK_WAIT_S"
ENV_COMMAND_MAX_DELIVER = "NOETL_STREAM_COMMAND_MAX_DELIVER"


def home_dir() -> Path:
    raw = os.environ.get(ENV_HOME)
    path = Path(raw).expanduser() if raw else Path.home() / ".local" / "share" / "noetl-stream"
    path.mkdir(parents=True, exist_ok=True)
    return path


def nats_url_from_env() -> str | None:
    return os.environ.get(ENV_NATS_URL) or None


def subject_prefix() -> str:
    return os.environ.get(ENV_PREFIX, "noetl")


def command_lease_overrides() -> tuple[float | None, int | None]:
    """(ack_wait_s, max_deliver) for worker pool consumers, when set in the environment."""
    ack_wait = os.environ.get(ENV_COMMAND_ACK_WAIT_S)
    max_deliver = os.environ.get(ENV_COMMAND_MAX_DELIVER)
    return (float(ack_wait) if ack_wait else None, int(max_deliver) if max_deliver else None)
