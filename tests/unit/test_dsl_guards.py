"""Which guards may hand a failure on (dsl/guards.py, docs/dialects.md)."""

from __future__ import annotations

import pytest

from noetl_stream.dsl.guards import reads_failure


@pytest.mark.parametrize("when", [
    "{{ event.name == 'step.failed' }}",
    "{{ 'call.error' == event.name }}",
    "{{ event.name in ['loop.failed', 'step.done'] }}",
    "{{ error is defined }}",
    "{{ error.status in [502, 503] }}",
    "{{ output.status == 'error' }}",
    "{{ outcome.error.kind == 'server_error' }}",
    "{{ response.status_code == 404 }}",
    "{{ this['status'] == 'error' }}",
    "{{ event.payload.error.message }}",
    "event.name == 'step.failed'",
])
def test_guards_that_read_the_failure(when: str) -> None:
    assert reads_failure(when)


@pytest.mark.parametrize("when", [
    None, "{{ workload.go }}", "{{ true }}", "{{ event.name == 'call.done' }}",
    "{{ event.name == 'call.done' and not response.paging.hasMore }}",
    "{{ result.n > 3 }}", "{{ workload.status == 'error' }}", "{{ syntax error ( }}",
])
def test_guards_true_for_other_reasons(when: str | None) -> None:
    assert not reads_failure(when)
