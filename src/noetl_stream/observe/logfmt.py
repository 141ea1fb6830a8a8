"""Log records as text lines or as one JSON object per line (`--log-format json`), for log
shippers that parse JSON.
"""

from __future__ import annotations

import logging
import sys

from noetl_stream import jsonutil
from noetl_stream.isotime import iso_time

TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
LOG_FORMATS = ("text", "json")
# Attributes every LogRecord has; anything else was passed with `extra=` and is kept as a field.
_STANDARD = set(logging.LogRecord("", 0, "", 0, "", (), None).__dict__) | {"message", "asctime"}


class JsonFormatter(logging.Formatter):
    """`{"time", "level", "logger", "message", ...extra, "exception"?}` on one line."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, object] = {"time": iso_time(record.created), "level": record.levelname,
                                 "logger": record.name, "message": record.getMessage()}
        for key, value in record.__dict__.items():
            if key not in _STANDARD and not key.startswith("_"):
                entry[key] = value
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return jsonutil.dumps_str(entry)


def configure(level: int, fmt: str = "text") -> None:
    """Log to stderr at `level` in `fmt` (replacing what was configured before)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else logging.Formatter(TEXT_FORMAT))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level)
    # JSON is what log shippers read: give them a line per task call without -v (task_log.py).
    logging.getLogger("noetl_stream.tasks").setLevel(
        min(level, logging.INFO) if fmt == "json" else logging.NOTSET)
