"""noetl-stream: a NATS JetStream-native runtime for NoETL playbooks."""

__version__ = "0.1.0"
