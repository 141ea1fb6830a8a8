"""Conformance playbooks through `noetl-stream run --json`, each on its own embedded nats-server."""

from __future__ import annotations

import pytest
from cli import PLAYBOOKS, run_cli, run_playbook

from local_http import HttpService
from noetl_stream.bus.connection import Bus
from noetl_stream.bus.nats_server import free_port

pytestmark = pytest.mark.e2e


async def test_hello_runs_python_steps_and_prints_one_json_summary() -> None:
    out = await run_playbook("hello.yaml")

    assert out.returncode == 0, out.stderr
    summary = out.summary
    assert set(summary) == {"execution_id", "status", "result", "failed_step", "error", "steps",
                            "ctx", "vars"}
    assert summary["failed_step"] is None
    assert summary["status"] == "completed"
    assert summary["error"] is None
    assert summary["result"] == {"text": "HELLO WORLD"}
    assert summary["steps"] == {
        "start": {"status": "completed", "runs": 1, "result": {"greeting": "hello world"}},
        "shout": {"status": "completed", "runs": 1, "result": {"text": "HELLO WORLD"}},
    }


async def test_hello_without_json_shows_progress_on_stderr() -> None:
    out = await run_cli("run", str(PLAYBOOKS / "hello.yaml"))

    assert out.returncode == 0, out.stderr
    assert "shout" in out.stderr
    assert "completed" in out.stderr


@pytest.mark.parametrize(("size", "taken", "skipped"), [(5, "small", "big"), (50, "big", "small")])
async def test_exclusive_routing_takes_one_branch_and_the_join_fires_once(
        size: int, taken: str, skipped: str) -> None:
    out = await run_playbook("exclusive_join.yaml", "--set", f"size={size}")

    assert out.returncode == 0, out.stderr
    steps = out.summary["steps"]
    assert steps[taken]["status"] == "completed"
    assert steps[skipped] == {"status": "skipped", "runs": 0, "result": None}
    assert steps["report"] == {"status": "completed", "runs": 1, "result": {"labels": [taken]}}


@pytest.mark.parametrize(("with_c", "total"), [(False, 23), (True, 123)])
async def test_inclusive_routing_takes_every_matching_branch_and_joins_them(
        with_c: bool, total: int) -> None:
    out = await run_playbook("inclusive_join.yaml", "--set", f"with_c={str(with_c).lower()}")

    assert out.returncode == 0, out.stderr
    steps = out.summary["steps"]
    assert steps["a"]["runs"] == steps["b"]["runs"] == 1
    assert steps["c"]["status"] == ("completed" if with_c else "skipped")
    assert steps["merge"] == {"status": "completed", "runs": 1, "result": {"total": total}}


async def test_sequential_and_parallel_loops_keep_results_in_item_order() -> None:
    out = await run_playbook("loops.yaml")

    assert out.returncode == 0, out.stderr
    steps = out.summary["steps"]
    assert steps["start"] == {"status": "completed", "runs": 1,
                              "result": [{"square": 1}, {"square": 4}, {"square": 9}, {"square": 16}]}
    assert steps["fan_out"] == {"status": "completed", "runs": 1, "result": [0, 10, 20, 30, 40, 50]}
    assert out.summary["result"] == {"squares": 30, "tens": 150}


async def test_retry_policy_calls_a_flaky_service_until_it_answers(http_service: HttpService) -> None:
    out = await run_playbook("retry_http.yaml", "--set", f"base={http_service.url}", "--set", "fail=2")

    assert out.returncode == 0, out.stderr
    assert out.summary["result"] == {"key": "retry", "calls": 3}
    assert http_service.calls["retry"] == 3


async def test_retry_policy_gives_up_after_its_attempts(http_service: HttpService) -> None:
    out = await run_playbook("retry_http.yaml", "--set", f"base={http_service.url}", "--set", "fail=10")

    assert out.returncode == 1
    error = out.summary["error"]
    assert error["step"] == "start"
    assert error["status"] == 503
    assert error["attempts"] == 4 and "after 4 attempts" in error["message"]
    assert http_service.calls["retry"] == 4


async def test_live_progress_shows_each_retry_and_why(http_service: HttpService) -> None:
    out = await run_cli("run", str(PLAYBOOKS / "retry_http.yaml"), "--set",
                        f"base={http_service.url}", "--set", "fail=10")

    assert out.returncode == 1
    retries = [line.split("s  ", 1)[1] for line in out.stderr.splitlines() if "↻" in line]
    assert retries == [f"↻ start {n}/4 in 0.05s: HTTP 503" for n in (2, 3, 4)], out.stderr
    assert "failed after 4 attempts" in out.stderr


async def test_pagination_jumps_back_with_set_iter_until_the_last_page(
        http_service: HttpService) -> None:
    out = await run_playbook("paginate.yaml", "--set", f"base={http_service.url}")

    assert out.returncode == 0, out.stderr
    assert out.summary["result"] == {"ids": list(range(1, 11)), "pages": 3}
    assert http_service.calls["items"] == 3
    assert out.summary["steps"]["start"]["runs"] == 1


async def test_unhandled_failure_exits_1_and_names_the_step_and_message() -> None:
    out = await run_playbook("fail_unhandled.yaml")

    assert out.returncode == 1
    summary = out.summary
    assert summary["status"] == "failed"
    assert summary["failed_step"] == "boom"
    assert summary["result"] is None  # not start's {"ok": true}: the execution has no result
    assert summary["error"]["step"] == "boom"
    assert summary["error"]["message"].startswith('step "boom" failed:')
    assert "RuntimeError: disk quota exceeded" in summary["error"]["message"]
    assert summary["steps"]["start"] == {"status": "completed", "runs": 1, "result": {"ok": True}}
    assert summary["steps"]["boom"]["status"] == "failed"
    assert "never" not in summary["steps"] or summary["steps"]["never"]["runs"] == 0


async def test_failed_step_does_not_follow_an_arc_whose_guard_ignores_the_failure() -> None:
    out = await run_playbook("fail_guard_ignores_failure.yaml")

    assert out.returncode == 1
    summary = out.summary
    assert summary["status"] == "failed"
    assert summary["error"]["step"] == "start"
    assert "ValueError: boom" in summary["error"]["message"]
    assert "b" not in summary["steps"] or summary["steps"]["b"]["runs"] == 0


async def test_a_misspelt_workload_key_is_refused_before_anything_runs() -> None:
    out = await run_playbook("template_typo.yaml")

    assert out.returncode == 2 and out.stdout == ""
    warning, refusal = out.stderr.strip().splitlines()
    # Located as a parse error is: the file and the line of the task holding the template.
    assert warning.endswith('template_typo.yaml:10: step "start" field "tool.input": warning: '
                            'reads workload.traget, which the workload does not define; did you '
                            'mean "target"?')
    assert refusal.endswith("template_typo.yaml: rejected: templates read workload 'traget', "
                            "which neither the workload nor the payload gives (pass --set "
                            "KEY=VALUE or --payload); nothing was run")
    # A payload that gives the key runs it.
    given = await run_playbook("template_typo.yaml", "--payload", '{"traget": {"region": "x"}}')
    assert given.returncode == 0 and given.summary["result"] == "x", given.stderr


async def test_routed_failure_continues_on_the_failure_arc() -> None:
    out = await run_playbook("fail_routed.yaml")

    assert out.returncode == 0, out.stderr
    steps = out.summary["steps"]
    assert steps["start"]["status"] == "failed"
    assert steps["normal"]["status"] == "skipped"
    assert steps["recover"]["status"] == "completed"
    assert "upstream is down" in steps["recover"]["result"]["recovered_from"]


@pytest.mark.parametrize(("enabled", "status"), [("false", "skipped"), ("true", "completed")])
async def test_admission_policy_skips_a_step_and_its_downstream(enabled: str, status: str) -> None:
    out = await run_playbook("admission.yaml", "--set", f"enabled={enabled}")

    assert out.returncode == 0, out.stderr
    steps = out.summary["steps"]
    assert steps["guarded"]["status"] == status
    assert steps["after"]["status"] == status
    assert steps["guarded"]["runs"] == (1 if status == "completed" else 0)


async def test_vars_block_and_set_ctx_are_reported_and_readable_downstream() -> None:
    out = await run_playbook("vars_block.yaml")

    assert out.returncode == 0, out.stderr
    assert out.summary["vars"] == {"row_count": 7, "doubled": 14}
    assert out.summary["ctx"] == {"table": "orders"}
    assert out.summary["result"] == "orders:7"


async def test_rejected_playbook_exits_2_with_file_line_and_publishes_nothing(
        bus: Bus, noetl_home: object) -> None:
    path = PLAYBOOKS / "rejected.yaml"

    out = await run_cli("run", str(path), "--json", "--nats-url", bus.nc.connected_url.geturl()
                        if bus.nc.connected_url else "")

    assert out.returncode == 2
    assert out.stdout == ""
    assert f'{path}:8: step "start" field "tool.kind": unknown tool kind "pyton"' in out.stderr
    assert f"{path}:11:" in out.stderr
    for stream in ("NOETL_REQUESTS", "NOETL_COMMANDS", "NOETL_EVENTS"):
        assert (await bus.js.stream_info(stream)).state.messages == 0


async def test_set_and_payload_are_merged_over_the_workload() -> None:
    out = await run_playbook("payload.yaml", "--payload", '{"name": "from-payload", "list": [1, 2]}',
                             "--set", "a.b=3", "--set", "a.c=word")

    assert out.returncode == 0, out.stderr
    assert out.summary["result"] == {"a": {"b": 3, "keep": True, "c": "word"},
                                     "name": "from-payload", "list": [1, 2]}


async def test_bad_payload_is_rejected_with_exit_2() -> None:
    out = await run_playbook("payload.yaml", "--payload", "[1, 2]")

    assert out.returncode == 2
    assert "--payload must be a JSON object" in out.stderr


async def test_unreachable_nats_url_exits_3() -> None:
    url = f"nats://127.0.0.1:{free_port()}"

    out = await run_playbook("hello.yaml", "--nats-url", url, timeout_s=30)

    assert out.returncode == 3
    assert out.stdout == ""
    assert f"cannot reach NATS at {url}" in out.stderr
