"""Settings read from the environment and flags, validated once at start-up."""

from __future__ import annotations

import os
from pathlib import Path

ENV_HOME = "NOETL_STREAM_HOME"
ENV_NATS_URL = "NOETL_STREAM_NATS_URL"
ENV_PREFIX = "NOETL_STREAM_PREFIX"


def home_dir() -> Path:
    raw = os.environ.get(ENV_HOME)
    path = Path(raw).expanduser() if raw else Path.home() / ".local" / "share" / "noetl-stream"
    path.mkdir(parents=True, exist_ok=True)
    return path


def nats_url_from_env() -> str | None:
    return os.environ.get(ENV_NATS_URL) or None


def subject_prefix() -> str:
    return os.environ.get(ENV_PREFIX, "noetl")
