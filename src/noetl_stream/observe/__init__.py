"""Seeing what runs: JSON logs, Prometheus metrics, OpenTelemetry traces (docs/observability.md)."""
