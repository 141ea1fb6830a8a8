"""`loop:` shapes: cursor loops (NoETL `loop.cursor` + `spec.mode: cursor`) and a templated
`max_in_flight`, with one test per validation message (file, line, step, field).

The header in unit_helpers is 4 lines, so the first body line of every playbook is line 5.
"""

from __future__ import annotations

import pytest
from unit_helpers import FILE, parse, playbook_text

from noetl_stream.dsl import parse_playbook
from noetl_stream.errors import PlaybookError

# The shape of NoETL's production cursor loops (e2e pft_flow_test/test_pft_flow_v2.yaml).
PFT_STEP = """
    workflow:
      - step: fetch_assessments
        loop:
          cursor:
            kind: postgres
            auth: pg_k8s
            claim: |
              WITH candidate AS (
                SELECT patient_id FROM queue
                WHERE execution_id = '{{ execution_id }}' AND status = 'pending'
                ORDER BY patient_id
                FOR UPDATE SKIP LOCKED
                LIMIT {{ __frame_max_rows | default(1) | int }}
              )
              UPDATE queue q SET status = 'claimed' FROM candidate c
              WHERE q.patient_id = c.patient_id
              RETURNING q.patient_id, q.facility_mapping_id;
          iterator: patient
          spec:
            mode: cursor
            max_in_flight: 8
            frame:
              max_rows: 50
              lease_seconds: 120
              row_concurrency: 4
        tool:
          - name: save
            kind: postgres
            auth: pg_k8s
            command: "UPDATE queue SET status = 'done' WHERE patient_id = {{ iter.patient.patient_id }}"
"""


def errors_of(body: str, *, strict: bool = False) -> list[str]:
    with pytest.raises(PlaybookError) as caught:
        parse_playbook(playbook_text(body), FILE, strict=strict)
    return [str(i) for i in caught.value.issues if i.severity == "error"]


def cursor_loop(loop_body: str) -> str:
    lines = "\n".join("          " + line for line in loop_body.strip("\n").splitlines())
    return f"""
    workflow:
      - step: drain
        loop:
{lines}
        tool: {{kind: noop}}
"""


def test_pft_cursor_loop_parses_to_a_cursor_loop_spec() -> None:
    parsed = parse_playbook(playbook_text(PFT_STEP), FILE)
    loop = parsed.playbook.step("fetch_assessments").loop
    assert loop is not None and loop.cursor is not None
    assert (loop.mode, loop.iterator, loop.max_in_flight, loop.collection) == ("cursor", "patient", 8,
                                                                                None)
    assert (loop.cursor.kind, loop.cursor.auth, loop.cursor.connection) == ("postgres", "pg_k8s", None)
    assert "FOR UPDATE SKIP LOCKED" in loop.cursor.claim
    assert [str(w) for w in parsed.warnings] == [
        'test.yaml:26: step "fetch_assessments" field "loop.spec.frame": warning: frame '
        "lease_seconds, max_rows, row_concurrency not used: each iteration claims one row "
        "(`__frame_max_rows` is 1); max_in_flight sets how many claim at once"]


def test_frame_knobs_do_not_reach_the_tasks_spec() -> None:
    step = parse(PFT_STEP).step("fetch_assessments")
    assert "frame" not in step.tasks[0].spec and "mode" not in step.tasks[0].spec


def test_cursor_without_mode_is_a_cursor_loop_with_postgres_by_default() -> None:
    loop = parse(cursor_loop("""
        cursor: {connection: "postgresql://u@h/db", claim: "DELETE FROM q RETURNING id"}
        iterator: job
    """)).step("drain").loop
    assert loop is not None and loop.cursor is not None
    assert (loop.mode, loop.cursor.kind, loop.max_in_flight) == ("cursor", "postgres", None)


def test_max_in_flight_template_is_kept_for_the_router() -> None:
    loop = parse("""
        workflow:
          - step: each
            loop:
              in: [1, 2]
              iterator: x
              spec: {mode: parallel, max_in_flight: "{{ workload.width }}"}
    """).step("each").loop
    assert loop is not None and loop.max_in_flight == "{{ workload.width }}"


@pytest.mark.parametrize(("value", "shown"), [("0", "0"), ("-2", "-2"), ("'many'", "'many'"),
                                              ("1.5", "1.5"), ("true", "True")])
def test_max_in_flight_that_is_not_a_positive_whole_number_is_an_error(value: str, shown: str) -> None:
    assert errors_of(f"""
        workflow:
          - step: each
            loop:
              in: [1, 2]
              iterator: x
              spec: {{mode: parallel, max_in_flight: {value}}}
    """) == [f'test.yaml:8: step "each" field "loop.spec.max_in_flight": max_in_flight must be a '
             f"positive whole number or a template giving one, got {shown}"]


def test_max_in_flight_template_that_does_not_parse_is_an_error() -> None:
    (message,) = errors_of("""
        workflow:
          - step: each
            loop:
              in: [1, 2]
              iterator: x
              spec: {mode: parallel, max_in_flight: "{{ workload.width "}
    """)
    assert message.startswith('test.yaml:8: step "each" field "loop.spec.max_in_flight": template '
                              "'{{ workload.width ' does not parse")


def test_cursor_mode_without_cursor_is_an_error() -> None:
    assert errors_of(cursor_loop("""
        iterator: job
        spec: {mode: cursor}
    """)) == ['test.yaml:8: step "drain" field "loop.cursor": loop mode cursor needs `loop.cursor` '
              "with a `claim:` query"]


def test_cursor_and_collection_together_are_an_error() -> None:
    assert errors_of(cursor_loop("""
        in: [1, 2]
        cursor: {auth: pg, claim: "DELETE FROM q RETURNING id"}
        iterator: job
    """)) == ['test.yaml:9: step "drain" field "loop.cursor": a loop takes `in:` or `cursor:`, not '
              "both"]


def test_cursor_in_a_parallel_loop_is_an_error() -> None:
    assert errors_of(cursor_loop("""
        cursor: {auth: pg, claim: "DELETE FROM q RETURNING id"}
        iterator: job
        spec: {mode: parallel}
    """)) == ['test.yaml:8: step "drain" field "loop.spec.mode": a loop with `cursor:` runs in mode '
              'cursor, not "parallel"']


def test_cursor_without_claim_is_an_error() -> None:
    assert errors_of(cursor_loop("""
        cursor: {kind: postgres, auth: pg}
        iterator: job
    """)) == ['test.yaml:8: step "drain" field "loop.cursor.claim": loop.cursor needs `claim:`, the '
              "SQL that claims one item and returns it (no row: nothing left)"]


def test_cursor_without_auth_or_connection_is_an_error() -> None:
    assert errors_of(cursor_loop("""
        cursor: {claim: "DELETE FROM q RETURNING id"}
        iterator: job
    """)) == ['test.yaml:8: step "drain" field "loop.cursor.auth": loop.cursor needs `auth:` (a '
              "credential name) or `connection:` to reach the database it claims from"]


def test_cursor_of_an_unknown_kind_is_an_error() -> None:
    assert errors_of(cursor_loop("""
        cursor: {kind: mongo, auth: m, claim: "x"}
        iterator: job
    """)) == ['test.yaml:8: step "drain" field "loop.cursor.kind": unknown kind "mongo" for '
              "loop.cursor; claims run on postgres"]


def test_cursor_claim_template_that_does_not_parse_is_an_error() -> None:
    (message,) = errors_of(cursor_loop("""
        cursor: {auth: pg, claim: "UPDATE q SET s = 1 WHERE e = '{{ execution_id '"}
        iterator: job
    """))
    assert message.startswith('test.yaml:8: step "drain" field "loop.cursor.claim": template')


def test_unknown_cursor_key_is_a_warning_or_in_strict_mode_an_error() -> None:
    body = cursor_loop("""
        cursor: {auth: pg, claim: "DELETE FROM q RETURNING id", clam: x}
        iterator: job
    """)
    warnings = parse_playbook(playbook_text(body), FILE).warnings
    assert [(w.field, w.severity) for w in warnings] == [("loop.cursor.clam", "warning")]
    assert len(errors_of(body, strict=True)) == 1


def test_frame_process_frame_is_an_error() -> None:
    assert errors_of(cursor_loop("""
        cursor: {auth: pg, claim: "DELETE FROM q RETURNING id"}
        iterator: job
        spec: {mode: cursor, frame: {process: frame}}
    """)) == ['test.yaml:10: step "drain" field "loop.spec.frame.process": frame process "frame" is '
              "not supported: each iteration runs the tasks on one claimed row (process: row)"]


def test_frame_on_a_collection_loop_is_an_error() -> None:
    assert errors_of("""
        workflow:
          - step: each
            loop:
              in: [1]
              iterator: x
              spec: {mode: parallel, frame: {max_rows: 5}}
    """) == ['test.yaml:10: step "each" field "loop.spec.frame": loop.spec.frame is a mapping that '
             "only cursor loops take"]
