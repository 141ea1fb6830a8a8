"""A playbook written in NoETL's forms runs through `noetl-stream run --json` with NoETL's meaning:
executor.spec.entry_step, a duration spec.timeout, spec.next_mode, guards without braces, text
loop.in, noop result/message, NoETL's template filters, timeout_seconds and retry_on."""

from __future__ import annotations

import pytest
from cli import run_playbook

pytestmark = pytest.mark.e2e


async def test_noetl_forms_playbook_runs_with_noetls_meaning() -> None:
    out = await run_playbook("noetl_forms.yaml")

    assert out.returncode == 0, out.stderr
    summary = out.summary
    assert summary["status"] == "completed", summary["error"]
    begin = {"n": 7, "tags": ["a", "b", "c"], "keys": ["x", "y"]}
    big = [{"status": "ok", "message": f"tag {t}"} for t in "abc"]
    assert summary["steps"]["begin"] == {"status": "completed", "runs": 1, "result": begin}
    assert summary["steps"]["small"]["status"] == "skipped"
    assert summary["steps"]["big"]["result"] == big
    assert summary["result"] == {"begin": begin, "big": big}
