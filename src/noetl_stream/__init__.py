"""noetl-stream: a NATS JetStream-native runtime for NoETL playbooks."""

from noetl_stream.deferred_imports import defer_all

__version__ = "0.1.0"

defer_all()
