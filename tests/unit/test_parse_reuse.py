"""The same text parsed twice in one process (`run` checks a playbook, then its embedded server
reads the request) is parsed once; what could differ between the two is parsed anew.
"""

from __future__ import annotations

from pathlib import Path

from unit_helpers import FILE, playbook_text

from noetl_stream.dsl import load_playbook, parse_playbook

CHAIN = playbook_text("""
    workflow:
      - step: start
        tool: {kind: noop}
        next: {arcs: [{step: finish}]}
      - step: finish
        tool: {kind: noop}
""")


def test_a_second_parse_of_the_same_text_returns_the_same_ir() -> None:
    first = parse_playbook(CHAIN, FILE)
    second = parse_playbook(CHAIN, FILE)
    assert second.playbook is first.playbook
    assert second.warnings is not first.warnings  # each caller may change its own list


def test_another_file_name_or_strictness_is_parsed_anew() -> None:
    first = parse_playbook(CHAIN, FILE)
    assert parse_playbook(CHAIN, "other.yaml").playbook is not first.playbook
    assert parse_playbook(CHAIN, FILE, strict=True).playbook is not first.playbook


def test_a_playbook_naming_script_files_is_read_from_disk_each_time(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text("result = 1\n")
    path = tmp_path / "pb.yaml"
    path.write_text(playbook_text("""
        workflow:
          - step: start
            tool: {kind: python, script: {uri: ./a.py, source: {type: file}}}
    """))
    assert load_playbook(path).playbook.step("start").tasks[0].config["code"] == "result = 1\n"
    (tmp_path / "a.py").write_text("result = 2\n")
    assert load_playbook(path).playbook.step("start").tasks[0].config["code"] == "result = 2\n"
