"""Helpers that tests and users share: drive the pure router by hand (`RouterHarness`)."""

from noetl_stream.testing.router_harness import Reply, RouterHarness, outcome_event

__all__ = ["Reply", "RouterHarness", "outcome_event"]
