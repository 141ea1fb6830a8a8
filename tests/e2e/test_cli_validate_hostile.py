"""`noetl-stream validate` on hostile files: one FILE:LINE line each, exit 2, never a traceback
or a hang (the shapes an outside fuzzing campaign found)."""

from __future__ import annotations

from pathlib import Path

import pytest
from cli import run_cli

pytestmark = pytest.mark.e2e

HEAD = b"apiVersion: noetl.io/v2\nkind: Playbook\nmetadata: {name: f, path: f}\n"
STEP = b"workflow:\n  - step: start\n    tool: {kind: noop}\n"
LAUGHS = b"workload:\n" + b"\n".join(
    [b"  a0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    + [f"  a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]".encode() for i in range(1, 10)]) + b"\n"

CASES = {
    "arc_input": b"workflow:\n  - step: start\n    tool: {kind: noop}\n"
                 b"    next: {arcs: [{step: end, input: \"x\"}]}\n",
    "keychain_kind": b"keychain:\n  - {name: k, kind: [env]}\n" + STEP,
    "rule_set_ctx": b"workflow:\n  - step: start\n    tool:\n      kind: noop\n      spec: {policy: "
                    b"{rules: [{when: '{{ true }}', then: {do: continue, set_ctx: 5}}]}}\n",
    "task_set": b"workflow:\n  - step: start\n    tool: {kind: noop, set: \"x\"}\n",
    "nesting": b"workload: " + b"[" * 300 + b"]" * 300 + b"\n" + STEP,
    "not_utf8": b"workflow:\n  - step: start\n    desc: \"\xff\xfe\"\n    tool: {kind: noop}\n",
    "billion_laughs": LAUGHS + STEP,
    "pool": b"workflow:\n  - step: start\n    pool: a.b\n    tool: {kind: noop}\n",
}


@pytest.mark.parametrize("case", sorted(CASES))
async def test_hostile_playbook_is_one_file_line_error_and_exit_2(tmp_path: Path, case: str) -> None:
    path = tmp_path / f"{case}.yaml"
    path.write_bytes(HEAD + CASES[case])

    out = await run_cli("validate", str(path), timeout_s=30)

    assert out.returncode == 2, out
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"{path}:"), out.stderr
    assert lines[0].split(":")[1].isdigit() and "Traceback" not in out.stderr


async def test_validate_counts_the_warnings_it_printed_in_its_ok_line(tmp_path: Path) -> None:
    path = tmp_path / "typo.yaml"
    path.write_text("apiVersion: noetl.io/v2\nkind: Playbook\nmetadata: {name: typo}\n"
                    "workload: {name: x}\nworkflow:\n  - step: start\n    next: second\n"
                    "  - step: second\n    tool: {kind: python, input: {v: '{{ strat }}'}, "
                    "code: 'result = v'}\n")

    out = await run_cli("validate", str(path))

    assert out.returncode == 0, out.stderr
    assert out.stderr.count("warning:") == 1, out.stderr
    assert out.stdout == f"{path}: ok (2 steps, 1 warning)\n"
