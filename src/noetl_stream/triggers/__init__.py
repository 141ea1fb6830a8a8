"""Triggers: documents that start executions on a schedule or on messages (docs/triggers.md)."""
