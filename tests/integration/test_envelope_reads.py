"""Reads of a result through NoETL's envelopes on a real worker and a real local HTTP server:
`output.data.data` as the body in a task policy even when the body has its own `data` key, a
pipeline task read by name, an http list body and loop results bound whole into python inputs,
and a single-tool step's result read by the step's name in its own policy."""

from __future__ import annotations

import pytest
from plain_client import PlainClient

from local_http import HttpService

pytestmark = pytest.mark.integration

HEADER = "apiVersion: noetl.io/v2\nkind: Playbook\nmetadata:\n  name: envelope-reads\n"

HTTP_READS = HEADER + """\
workflow:
  - step: start
    tool:
      - name: fetch_records
        kind: http
        url: "{{ workload.url }}/records"
        params: {page: 1, size: 3}
        spec:
          policy:
            rules:
              - else:
                  then:
                    do: continue
                    set:
                      ctx.next_page: "{{ output.data.data.paging.next_page }}"
                      ctx.ids: "{{ output.data.data.data | map(attribute='id') | list }}"
                      ctx.total: "{{ output.data.meta.total }}"
                      ctx.code: "{{ output.data.status_code }}"
      - name: fetch_posts
        kind: http
        url: "{{ workload.url }}/posts"
        params: {n: 4}
      - name: summarise
        kind: python
        input:
          resp: "{{ fetch_posts }}"
          posts_code: "{{ fetch_posts.status_code }}"
          posts_n: "{{ fetch_posts.data | length }}"
          records_code: "{{ fetch_records.status_code }}"
          records_first: "{{ fetch_records.data.data[0].id }}"
        code: |
          result = {"status": resp["status_code"], "n": len(resp["data"]),
                    "ids": [post["id"] for post in resp], "lang": resp.get("body")[0]["meta"]["lang"],
                    "posts_code": posts_code, "posts_n": posts_n,
                    "records_code": records_code, "records_first": records_first}
"""


@pytest.mark.usefixtures("services")
async def test_http_envelope_reads_in_policies_later_tasks_and_python_inputs(
        client: PlainClient, http_service: HttpService) -> None:
    feed = await client.run("envelope-http-1", HTTP_READS, payload={"url": http_service.url})

    final = feed.final
    assert final["event_type"] == "execution.completed", final
    assert {k: final["ctx"][k] for k in ("next_page", "ids", "total", "code")} == {
        "next_page": 2, "ids": [1, 2, 3], "total": 10, "code": 200}
    assert final["steps"]["start"]["result"] == {
        "status": 200, "n": 4, "ids": [1, 2, 3, 4], "lang": "en", "posts_code": 200,
        "posts_n": 4, "records_code": 200, "records_first": 1}


LOOP_AND_OWN_STEP = HEADER + """\
workflow:
  - step: start
    loop: {in: "{{ workload.ns }}", iterator: n}
    tool: {kind: python, input: {n: "{{ iter.n }}"}, code: "result = {'n': n}"}
    next: {arcs: [{step: count}]}
  - step: count
    tool:
      kind: python
      input: {loop: "{{ start }}"}
      code: |
        result = {"total": loop["stats"]["total"], "first": loop["results"][0],
                  "count": loop["count"], "sum": sum(r["n"] for r in loop)}
      spec:
        policy:
          rules:
            - else: {then: {do: continue, set: {ctx.total: "{{ count.total }}", ctx.i: 0}}}
    next: {arcs: [{step: again}]}
  - step: again
    tool:
      kind: python
      input: {i: "{{ ctx.i }}"}
      code: "result = {'i': i + 1}"
      spec:
        policy:
          rules:
            - else: {then: {do: continue, set: {ctx.i: "{{ again.i }}"}}}
    next:
      spec: {mode: exclusive}
      arcs:
        - step: again
          when: "{{ ctx.i < 3 }}"
        - step: report
  - step: report
    tool: {kind: noop, input: {total: "{{ ctx.total }}", i: "{{ ctx.i }}"}}
"""


@pytest.mark.usefixtures("services")
async def test_loop_results_in_python_inputs_and_a_step_read_by_name_in_its_own_policy(
        client: PlainClient) -> None:
    feed = await client.run("envelope-loop-1", LOOP_AND_OWN_STEP, payload={"ns": [2, 3, 4]})

    final = feed.final
    assert final["event_type"] == "execution.completed", final
    assert final["steps"]["count"]["result"] == {"total": 3, "first": {"n": 2}, "count": 3,
                                                 "sum": 9}
    # Each run of `again` reads its own new result, never the run before: three runs, not five.
    assert final["steps"]["again"]["runs"] == 3
    assert final["steps"]["report"]["result"] == {"total": 3, "i": 3}
