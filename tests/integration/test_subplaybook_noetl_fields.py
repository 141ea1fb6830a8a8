"""NoETL's `kind: playbook` fields through the real server and worker: `payload:`,
`return_result:`, `result_step:` and a child named `./kid` without its extension.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from noetl_stream.bus.connection import Bus
from noetl_stream.dsl.composition import load_with_children
from noetl_stream.errors import PlaybookError
from noetl_stream.services import submit_and_watch
from noetl_stream.state.catalog import register_files, register_path

pytestmark = pytest.mark.integration

KID = """\
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: kid}
workload: {n: 1}
workflow:
  - step: start
    tool: {kind: python, code: "result = {'square': n * n}", input: {n: "{{ workload.n }}"}}
    next: [tally]
  - step: tally
    tool: {kind: python, code: "result = {'tally': n + 1}", input: {n: "{{ workload.n }}"}}
    next: [end]
  - step: end
"""

PARENT = """\
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: parent}
workflow:
  - step: start
    tool:
      kind: playbook
      path: ./sub/kid
      payload: {n: 4}
      return_result: true
    next: [chosen]
  - step: chosen
    tool:
      kind: playbook
      path: ./sub/kid
      payload: {n: 3}
      args: {n: 5}
      result_step: start
    next: [waited]
  - step: waited
    tool:
      kind: playbook
      path: ./sub/kid
      payload: {n: "{{ start.result.tally }}"}
      async: true
      return_result: true
"""


async def test_payload_return_result_and_result_step_as_noetl_reads_them(
        bus: Bus, services: None, tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "kid.yaml").write_text(KID)
    (tmp_path / "parent.yaml").write_text(PARENT)
    composed = load_with_children(tmp_path / "parent.yaml")
    await register_files(bus.js, composed.files)

    final = await submit_and_watch(bus, playbook_text=composed.files[0].text,
                                   playbook_file="parent.yaml", payload={},
                                   on_event=lambda e: None, timeout_s=60)

    assert final["status"] == "completed", final.get("error")
    steps = final["steps"]
    # The child ends on a step without a result: return_result gives the latest one before it.
    assert steps["start"]["result"] == {"tally": 5}
    # A non-empty `args` wins over `payload`, as in NoETL's tool; result_step names the step.
    assert steps["chosen"]["result"] == {"square": 25}
    # return_result waits even beside `async: true`.
    assert steps["waited"]["result"] == {"tally": 6}


def test_a_child_path_without_extension_that_names_no_file_is_reported(tmp_path: Path) -> None:
    (tmp_path / "parent.yaml").write_text(PARENT)

    with pytest.raises(PlaybookError) as caught:
        load_with_children(tmp_path / "parent.yaml")

    assert any('child playbook "./sub/kid"' in issue.message and "cannot be read" in issue.message
               for issue in caught.value.issues)


ABSOLUTE_KID = KID.replace("metadata: {name: kid}", "metadata: {name: kid, path: /shared/kid}")
ABSOLUTE_PARENT = """\
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: parent}
workflow:
  - step: start
    tool: {kind: playbook, path: /shared/kid, payload: {n: 6}, return_step: start}
"""


async def test_a_path_with_a_leading_slash_and_no_such_file_is_the_catalog_path_of_that_spelling(
        bus: Bus, services: None, tmp_path: Path) -> None:
    # NoETL keeps metadata.path as written, leading "/" and all, and a task's path names it.
    (tmp_path / "kid.yaml").write_text(ABSOLUTE_KID)
    (tmp_path / "parent.yaml").write_text(ABSOLUTE_PARENT)
    kid = load_with_children(tmp_path / "kid.yaml")
    await register_files(bus.js, kid.files)
    await register_path(bus.js, kid.playbook, kid.files[0].key)
    composed = load_with_children(tmp_path / "parent.yaml")  # no file /shared/kid: no error

    final = await submit_and_watch(bus, playbook_text=composed.files[0].text,
                                   playbook_file="parent.yaml", payload={},
                                   on_event=lambda e: None, timeout_s=60)

    assert composed.files[0].links == {}
    assert final["status"] == "completed", final.get("error")
    assert final["steps"]["start"]["result"] == {"square": 36}
