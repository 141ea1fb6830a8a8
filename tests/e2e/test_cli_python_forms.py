"""`script:` files, python `context` and fields without effect through the CLI, as a user runs them."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from cli import run_cli

from optional_extras import needs_duckdb

pytestmark = pytest.mark.e2e

HEADER = "apiVersion: noetl.io/v2\nkind: Playbook\nmetadata:\n  name: forms\n"


def write(folder: Path, body: str) -> Path:
    path = folder / "pb.yaml"
    path.write_text(HEADER + textwrap.dedent(body).lstrip("\n"))
    return path


async def test_run_reads_the_script_file_and_prints_warnings_before_starting(tmp_path: Path) -> None:
    (tmp_path / "scripts").mkdir()
    (tmp_path / "scripts" / "total.py").write_text(
        "result = {'total': sum(context['start']['rows']) * factor}\n")
    path = write(tmp_path, """
        workflow:
          - step: start
            tool:
              kind: python
              code: "result = {'rows': [1, 2, 3]}"
              output: {store: {kind: kv}}
            next: [total]
          - step: total
            tool:
              kind: python
              script: {uri: ./scripts/total.py, source: {type: file}}
              input: {factor: 2}
    """)

    out = await run_cli("run", str(path), "--json", "--quiet", cwd=Path("/"))

    assert out.returncode == 0, out.stderr
    assert out.summary["status"] == "completed"
    assert out.summary["result"] == {"total": 12}
    assert (f'{path}:10: step "start" field "tool.output": warning: NoETL\'s tool `output:` '
            "(store, select, accumulate, scope) is not supported") in out.stderr


async def test_strict_run_rejects_a_field_without_effect_and_runs_nothing(tmp_path: Path) -> None:
    path = write(tmp_path, """
        workflow:
          - step: start
            tool:
              kind: python
              function: handler
              code: "result = 1"
    """)

    out = await run_cli("run", str(path), "--json", "--quiet", "--strict")

    assert out.returncode == 2
    assert out.stdout == ""
    assert f'{path}:9: step "start" field "tool.function": calling an installed' in out.stderr
    assert "rejected (1 error); nothing was run" in out.stderr


async def test_validate_rejects_remote_and_missing_scripts_naming_file_line_step_and_field(
        tmp_path: Path) -> None:
    path = write(tmp_path, """
        workflow:
          - step: start
            tool:
              kind: postgres
              auth: pg
              script: {uri: "s3://bucket/load.sql", source: {type: s3}}
            next: [local]
          - step: local
            tool:
              kind: duckdb
              script: {uri: ./missing.sql, source: {type: file}}
    """)

    out = await run_cli("validate", str(path))

    assert out.returncode == 2
    assert (f'{path}:10: step "start" field "tool.script.source.type": script source "s3" '
            "(s3://bucket/load.sql) is not supported by this version of noetl-stream yet") \
        in out.stderr
    assert (f'{path}:15: step "local" field "tool.script.uri": script file "./missing.sql" '
            f"({tmp_path.resolve() / 'missing.sql'}) does not exist") in out.stderr


@needs_duckdb
async def test_base64_code_and_inline_scripts_run_through_the_cli(tmp_path: Path) -> None:
    import base64

    def b64(text: str) -> str:
        return base64.b64encode(text.encode()).decode()

    path = write(tmp_path, f"""
        workflow:
          - step: start
            tool: {{kind: python, input: {{n: 21}}, code_b64: "{b64('result = n * 2')}"}}
            next: [inline]
          - step: inline
            tool:
              kind: python
              input: {{m: "{{{{ start }}}}"}}
              script: {{source: {{type: inline}}, content: "result = m + 1"}}
            next: [sql]
          - step: sql
            tool: {{kind: duckdb, command_b64: "{b64('SELECT 40 + 2 AS answer')}"}}
    """)

    out = await run_cli("run", str(path), "--json", "--quiet")

    assert out.returncode == 0, out.stderr
    steps = out.summary["steps"]
    assert steps["start"]["result"] == 42
    assert steps["inline"]["result"] == 43
    assert out.summary["result"]["rows"] == [{"answer": 42}]
