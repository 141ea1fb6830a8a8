"""Loading a playbook with the children it names by file: links, nesting, cycles, errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from noetl_stream import ids
from noetl_stream.dsl.composition import is_file_reference, load_with_children
from noetl_stream.errors import PlaybookError
from playbook_files import read_playbook


def calls(name: str, path: str) -> str:
    return f"""\
apiVersion: noetl.io/v2
kind: Playbook
metadata:
  name: {name}
workflow:
  - step: start
    tool:
      kind: playbook
      path: {path}
"""


LEAF = read_playbook("unit", "dsl_composition_leaf.yaml")


@pytest.mark.parametrize(("path", "is_file"), [
    ("./child.yaml", True), ("../x/child.yml", True), ("/abs/child.yaml", True), ("child.yaml", True),
    ("catalog/child", False), ("fixtures/playbooks/composition/scorer", False)])
def test_paths_that_name_files_are_told_from_catalog_paths(path: str, is_file: bool) -> None:
    assert is_file_reference(path) is is_file


def test_children_resolve_against_the_file_that_names_them(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    (tmp_path / "parent.yaml").write_text(calls("parent", "./sub/child.yaml"))
    (tmp_path / "sub" / "child.yaml").write_text(calls("child", "./leaf.yaml"))
    (tmp_path / "sub" / "leaf.yaml").write_text(LEAF)

    result = load_with_children(tmp_path / "parent.yaml")

    parent, child, leaf = result.files
    assert [f.playbook.name for f in result.files] == ["parent", "child", "leaf"]
    assert parent.links == {"./sub/child.yaml": child.key}
    assert child.links == {"./leaf.yaml": leaf.key}
    assert leaf.links == {} and leaf.key == ids.playbook_key(LEAF)


def test_a_playbook_that_names_itself_is_loaded_once(tmp_path: Path) -> None:
    (tmp_path / "self.yaml").write_text(calls("self", "./self.yaml"))

    result = load_with_children(tmp_path / "self.yaml")

    (only,) = result.files
    assert only.links == {"./self.yaml": only.key}


def test_templated_paths_and_catalog_paths_are_left_to_run_time(tmp_path: Path) -> None:
    (tmp_path / "p.yaml").write_text(calls("p", "'{{ workload.which }}.yaml'"))
    (tmp_path / "q.yaml").write_text(calls("q", "catalog/child"))

    assert load_with_children(tmp_path / "p.yaml").files[0].links == {}
    assert load_with_children(tmp_path / "q.yaml").files[0].links == {}


def test_missing_and_invalid_children_are_errors_of_the_parent_path_field(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text(calls("a", "./missing.yaml"))
    (tmp_path / "b.yaml").write_text(calls("b", "./bad.yaml"))
    (tmp_path / "bad.yaml").write_text(LEAF.replace("  - step: start\n",
                                                    "  - step: start\n    next: nowhere\n"))

    with pytest.raises(PlaybookError) as missing:
        load_with_children(tmp_path / "a.yaml")
    with pytest.raises(PlaybookError) as invalid:
        load_with_children(tmp_path / "b.yaml")

    (issue,) = missing.value.issues
    assert str(issue).startswith(f'{tmp_path / "a.yaml"}:7: step "start" field "tool.path": child '
                                 'playbook "./missing.yaml"')
    assert "cannot be read" in issue.message
    first, second = (str(i) for i in invalid.value.issues)
    assert first == (f'{tmp_path / "b.yaml"}:7: step "start" field "tool.path": child playbook '
                     '"./bad.yaml" is invalid (1 error below)')
    assert second.startswith(f'{tmp_path / "bad.yaml"}:7: step "start" field "next": arc goes to '
                             'step "nowhere"')
