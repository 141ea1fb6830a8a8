"""An http task read by the later tasks of its pipeline and by its own `set:`, on a real worker and
a real local HTTP server: NoETL's task sequence shape `{status_code, headers, data: <body>, body}`,
whose `data` is the whole body even when the body has its own `data` key."""

from __future__ import annotations

import pytest
from plain_client import PlainClient

from local_http import HttpService

pytestmark = pytest.mark.integration

PIPELINE = """\
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: pipeline-http-reads}
workflow:
  - step: start
    tool:
      - name: fetch
        kind: http
        url: "{{ workload.url }}/records"
        params: {page: 1, size: 3}
        set:
          page_body: "{{ output }}"
      - name: report
        kind: python
        input:
          resp: "{{ fetch }}"
          page: "{{ page_body.data.paging.page }}"
          ids: "{{ page_body.data.data | map(attribute='id') | list }}"
          code: "{{ page_body.status_code }}"
          total: "{{ fetch.meta.total }}"
        code: |
          paging = resp.get("data", {}).get("paging", {})
          result = {"next_page": paging.get("next_page"), "n": len(resp["body"]["data"]),
                    "page": page, "ids": ids, "code": code, "total": total}
"""


@pytest.mark.usefixtures("services")
async def test_later_tasks_and_a_task_set_read_an_http_result_as_noetl_s_task_sequence(
        client: PlainClient, http_service: HttpService) -> None:
    feed = await client.run("pipeline-http-1", PIPELINE, payload={"url": http_service.url})

    final = feed.final
    assert final["event_type"] == "execution.completed", final
    assert final["steps"]["start"]["result"] == {
        "next_page": 2, "n": 3, "page": 1, "ids": [1, 2, 3], "code": 200, "total": 10}


PAGES = """\
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: pipeline-task-results}
workflow:
  - step: start
    tool: {kind: noop}
    set: {ctx.number: 1}
    next: page
  - step: page
    tool:
      - name: fetch
        kind: http
        url: "{{ workload.url }}/records"
        params: {page: "{{ ctx.number }}", size: 4}
      - name: check
        kind: python
        input: {resp: "{{ fetch }}"}
        code: |
          result = {"more": resp["data"]["paging"]["next_page"] is not None,
                    "n": len(resp["data"]["data"])}
    set: {ctx.number: "{{ ctx.number + 1 }}"}
    next:
      spec: {mode: exclusive}
      arcs:
        - step: page
          when: "{{ page.results.check.more }}"
        - step: report
  - step: report
    tool:
      kind: noop
      input:
        pages: "{{ ctx.number - 1 }}"
        last_code: "{{ page.results.fetch.status_code }}"
        last_ids: "{{ page.results.fetch.data.data | map(attribute='id') | list }}"
"""


@pytest.mark.usefixtures("services")
async def test_a_pipeline_step_s_per_task_results_route_its_arcs(
        client: PlainClient, http_service: HttpService) -> None:
    feed = await client.run("pipeline-pages-1", PAGES, payload={"url": http_service.url})

    final = feed.final
    assert final["event_type"] == "execution.completed", final.get("error")
    assert final["result"] == {"pages": 3, "last_code": 200, "last_ids": [9, 10]}
    assert http_service.calls["records"] == 3
