"""Python `libs:`, `script:` files for python and SQL, and templates in python code, as parsed.

Each error names `FILE:LINE: step "S" field "F"`; the header in unit_helpers is 4 lines, so the
first body line of every playbook is line 5.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from unit_helpers import FILE, playbook_text

from noetl_stream.dsl import load_playbook, parse_playbook
from noetl_stream.dsl.composition import load_with_children
from noetl_stream.dsl.scripts import FILES_MARKER, attach_files, split_files
from noetl_stream.errors import PlaybookError


def errors_of(text: str, *, file: str = FILE, base_dir: Path | None = None) -> list[str]:
    with pytest.raises(PlaybookError) as caught:
        parse_playbook(text, file, base_dir=base_dir)
    return [str(i) for i in caught.value.issues if i.severity == "error"]


def write_playbook(folder: Path, body: str, name: str = "pb.yaml") -> Path:
    path = folder / name
    path.write_text(playbook_text(body))
    return path


# -- libs ----------------------------------------------------------------------------------------

def test_libs_mapping_with_aliases_dotted_modules_and_from_form_is_kept_for_the_tool() -> None:
    libs = {"pd": "json", "storage": "os.path", "od": {"from": "collections", "import": "OrderedDict"},
            "os.path": "os.path"}
    result = parse_playbook(playbook_text("""
        workflow:
          - step: start
            tool:
              kind: python
              libs: {pd: json, storage: os.path, od: {from: collections, import: OrderedDict},
                     os.path: os.path}
              code: "result = 1"
    """), FILE)

    assert result.playbook.step("start").tasks[0].config["libs"] == libs
    assert result.warnings == []


def test_libs_as_a_list_imports_each_module_under_its_own_name() -> None:
    result = parse_playbook(playbook_text("""
        workflow:
          - step: start
            tool:
              kind: python
              libs: [json, os.path]
              code: "result = 1"
    """), FILE)
    (task,) = result.playbook.step("start").tasks
    assert task.config["libs"] == {"json": "json", "os.path": "os.path"}


def test_libs_that_is_neither_a_mapping_nor_a_list_of_names_is_an_error() -> None:
    assert errors_of(playbook_text("""
        workflow:
          - step: start
            tool:
              kind: python
              libs: json
              code: "result = 1"
    """)) == ['test.yaml:9: step "start" field "tool.libs": libs must be a mapping alias: module '
              "(e.g. `pd: pandas`) or a list of module names"]


@pytest.mark.parametrize(("entry", "message"), [
    ('"my-alias": json', 'libs alias "my-alias" is not a Python name the code could use'),
    ("pd: 'pandas; import os'", "libs entry \"pd\" names 'pandas; import os', which is not a "
                                "module name (dotted words such as google.cloud.storage)"),
    ("st: {from: google.cloud}", 'libs entry "st" must be a module name or {from: package, '
                                 "import: name}"),
])
def test_bad_libs_entry_is_an_error_naming_the_alias(entry: str, message: str) -> None:
    alias = entry.split(":")[0].strip('"')
    assert errors_of(playbook_text(f"""
        workflow:
          - step: start
            tool:
              kind: python
              libs: {{{entry}}}
              code: "result = 1"
    """)) == [f'test.yaml:9: step "start" field "tool.libs.{alias}": {message}']


# -- script: files ---------------------------------------------------------------------------------

def test_python_script_file_becomes_the_task_code_relative_to_the_playbook(tmp_path: Path) -> None:
    (tmp_path / "scripts").mkdir()
    (tmp_path / "scripts" / "double.py").write_text("result = {'n': n * 2}  # {{ not a template }}\n")
    path = write_playbook(tmp_path, """
        workflow:
          - step: start
            tool:
              kind: python
              script:
                uri: ./scripts/double.py
                source: {type: file}
    """)

    result = load_playbook(path)

    task = result.playbook.step("start").tasks[0]
    assert task.config == {"script": {"uri": "./scripts/double.py"},
                           "code": "result = {'n': n * 2}  # {{ not a template }}\n"}
    assert result.scripts == {"./scripts/double.py": task.config["code"]}


@pytest.mark.parametrize("kind", ["postgres", "duckdb"])
def test_sql_script_file_becomes_the_command(tmp_path: Path, kind: str) -> None:
    (tmp_path / "load.sql").write_text("SELECT {{ workload.n }} AS n;\n")
    path = write_playbook(tmp_path, f"""
        workload: {{n: 3}}
        workflow:
          - step: start
            tool:
              kind: {kind}
              script: {{uri: load.sql, source: {{type: file}}}}
    """)

    config = load_playbook(path).playbook.step("start").tasks[0].config

    assert config == {"script": {"uri": "load.sql"}, "command": "SELECT {{ workload.n }} AS n;\n"}


def test_script_type_is_inferred_from_a_path_and_a_script_wins_over_code_with_a_warning(
        tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text("result = 'from file'\n")
    path = write_playbook(tmp_path, """
        workflow:
          - step: start
            tool:
              kind: python
              script: {uri: ./a.py}
              code: "result = 'inline'"
    """)

    result = load_playbook(path)

    assert result.playbook.step("start").tasks[0].config["code"] == "result = 'from file'\n"
    assert [str(w) for w in result.warnings] == [
        f'{path}:10: step "start" field "tool.code": warning: "code" is ignored: "script" is '
        "given, and it wins"]


def test_missing_script_file_is_an_error_naming_the_field(tmp_path: Path) -> None:
    path = write_playbook(tmp_path, """
        workflow:
          - step: start
            tool:
              kind: duckdb
              script: {uri: ./sql/nope.sql, source: {type: file}}
    """)

    with pytest.raises(PlaybookError) as caught:
        load_playbook(path)

    assert [str(i) for i in caught.value.issues] == [
        f'{path}:9: step "start" field "tool.script.uri": script file "./sql/nope.sql" '
        f'({(tmp_path / "sql" / "nope.sql").resolve()}) does not exist']


@pytest.mark.parametrize(("script", "source"), [
    ("{uri: 'gs://bucket/x.py', source: {type: gcs, auth: gcp}}", "gcs"),
    ("{uri: 's3://bucket/x.py', source: {type: s3, region: eu-west-1}}", "s3"),
    ("{uri: 'https://example.com/x.py'}", "http"),
])
def test_remote_script_source_is_rejected_naming_file_line_step_and_field(script: str,
                                                                          source: str) -> None:
    (message,) = errors_of(playbook_text(f"""
        workflow:
          - step: start
            tool:
              kind: python
              script: {script}
    """))

    assert message.startswith('test.yaml:9: step "start" field "tool.script.source.type": '
                              f'script source "{source}" (')
    assert "is not supported by this version of noetl-stream yet" in message


@pytest.mark.parametrize(("script", "field", "text"), [
    ("{uri: ./x.py, source: {type: inline}}", "tool.script.content",
     "an inline script needs its text in `content:`"),
    ("{uri: ./x.py, source: {type: ftp}}", "tool.script.source.type",
     'script source type "ftp" is not one of file, inline, gcs, s3, http'),
    ("{source: {type: file}}", "tool.script.uri",
     "script needs `uri:` (a path relative to the playbook's file)"),
    ("{uri: '{{ workload.f }}', source: {type: file}}", "tool.script.uri",
     "a file script's uri may read only the playbook's own workload (the file is read when the "
     "playbook is loaded); '{{ workload.f }}' gave None"),
    ("{uri: ./x.py, source: {type: file}, sha: 1}", "tool.script.sha",
     'unknown key "sha" in script; it takes uri, source, encoding'),
    ("./x.py", "tool.script", "script must be a mapping {uri, source: {type}}"),
])
def test_malformed_script_is_an_error_naming_the_field(script: str, field: str, text: str) -> None:
    messages = errors_of(playbook_text(f"""
        workflow:
          - step: start
            tool:
              kind: python
              script: {script}
    """))

    assert f'test.yaml:9: step "start" field "{field}": {text}' in messages


def test_file_script_without_its_file_attached_is_an_error_where_no_disk_is_read() -> None:
    # The server and the HTTP API parse a text without reading the disk.
    assert errors_of(playbook_text("""
        workflow:
          - step: start
            tool:
              kind: python
              script: {uri: ./a.py, source: {type: file}}
    """)) == ['test.yaml:9: step "start" field "tool.script.uri": script file "./a.py" did not '
              "travel with the playbook: run or register the playbook with `noetl-stream run "
              "FILE` or `noetl-stream register FILE`, which read the files it names"]


def test_loaded_text_carries_its_script_files_and_parses_without_the_disk(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text("result = 'from the file'\n")
    path = write_playbook(tmp_path, """
        workflow:
          - step: start
            tool:
              kind: python
              script: {uri: ./a.py, source: {type: file}}
    """)

    (loaded,) = load_with_children(path).files
    (tmp_path / "a.py").unlink()  # what another machine sees: only the text

    assert FILES_MARKER in loaded.text
    again = parse_playbook(loaded.text, "elsewhere.yaml")
    assert again.playbook.step("start").tasks[0].config["code"] == "result = 'from the file'\n"
    assert split_files(loaded.text) == (path.read_text(), {"./a.py": "result = 'from the file'\n"})


def test_attached_files_change_the_text_and_replace_earlier_ones() -> None:
    text = playbook_text("workflow:\n  - step: start\n")

    first = attach_files(text, {"./a.py": "one"})
    second = attach_files(first, {"./a.py": "two"})

    assert first != second
    assert split_files(second) == (text, {"./a.py": "two"})
    assert attach_files(second, {}) == text


def test_damaged_attachment_is_an_error() -> None:
    text = playbook_text("workflow:\n  - step: start\n") + FILES_MARKER + "\n{not json\n"

    (message,) = errors_of(text)

    assert message.startswith("test.yaml: the files attached after the playbook are not valid JSON")


# -- templates in python code ------------------------------------------------------------------------

def test_python_code_with_a_broken_template_is_an_error_that_says_how_to_write_literal_braces() -> None:
    (message,) = errors_of(playbook_text("""
        workflow:
          - step: start
            tool:
              kind: python
              code: |
                x = "{% if %}"
    """))

    assert message.startswith('test.yaml:9: step "start" field "tool.code": template ')
    assert message.endswith("wrap literal ones in {% raw %}...{% endraw %}")


def test_python_code_with_dicts_and_f_strings_is_no_template() -> None:
    result = parse_playbook(playbook_text("""
        workflow:
          - step: start
            tool:
              kind: python
              code: |
                d = {"a": {"b": 1}}
                result = f"{d['a']}"
    """), FILE)

    assert result.playbook.step("start").tasks[0].config["code"] == (
        'd = {"a": {"b": 1}}\nresult = f"{d[\'a\']}"\n')


def test_child_playbook_carries_its_own_script_files(tmp_path: Path) -> None:
    (tmp_path / "child").mkdir()
    (tmp_path / "child" / "work.py").write_text("result = 'child work'\n")
    write_playbook(tmp_path / "child", """
        workflow:
          - step: start
            tool: {kind: python, script: {uri: ./work.py}}
    """, "child.yaml")
    path = write_playbook(tmp_path, """
        workflow:
          - step: start
            tool: {kind: playbook, path: ./child/child.yaml}
    """)

    parent, child = load_with_children(path).files

    assert split_files(parent.text)[1] == {}
    assert split_files(child.text)[1] == {"./work.py": "result = 'child work'\n"}
    assert parent.links == {"./child/child.yaml": child.key}


# -- code_b64 / command_b64 and inline scripts ----------------------------------------------------

def _b64(text: str) -> str:
    import base64
    return base64.b64encode(text.encode()).decode()


def test_code_b64_and_command_b64_are_decoded_into_the_kinds_field() -> None:
    result = parse_playbook(playbook_text(f"""
        workflow:
          - step: start
            tool: {{kind: python, code_b64: "{_b64('result = 1')}"}}
            next: q
          - step: q
            tool: {{kind: duckdb, command_b64: "{_b64('SELECT 1 AS x')}"}}
    """), FILE)
    (py,) = result.playbook.step("start").tasks
    (sql,) = result.playbook.step("q").tasks
    assert py.config["code"] == "result = 1" and "code_b64" not in py.config
    assert sql.config["command"] == "SELECT 1 AS x" and "command_b64" not in sql.config


def test_code_b64_that_is_not_base64_is_an_error_naming_the_field() -> None:
    errors = errors_of(playbook_text("""
        workflow:
          - step: start
            tool: {kind: python, code_b64: "not base64!"}
    """))
    assert errors == [f'{FILE}:7: step "start" field "tool.code_b64": code_b64 must be '
                      "base64-encoded UTF-8 text"]


def test_inline_script_takes_its_text_from_content() -> None:
    result = parse_playbook(playbook_text("""
        workflow:
          - step: start
            tool:
              kind: python
              script: {source: {type: inline}, content: "result = 2"}
    """), FILE)
    (task,) = result.playbook.step("start").tasks
    assert task.config["code"] == "result = 2"
    assert result.scripts == {}  # nothing to carry: the text is in the playbook


def test_inline_script_without_content_is_an_error() -> None:
    errors = errors_of(playbook_text("""
        workflow:
          - step: start
            tool:
              kind: python
              script: {source: {type: inline}}
    """))
    assert any('field "tool.script.content": an inline script needs its text' in e for e in errors)


def test_script_uri_may_read_the_playbooks_workload(tmp_path: Path) -> None:
    (tmp_path / "scripts").mkdir()
    (tmp_path / "scripts" / "a.py").write_text("result = 7\n")
    path = tmp_path / "pb.yaml"
    path.write_text(playbook_text("""
        workload:
          script_path: ./scripts/a.py
        workflow:
          - step: start
            tool:
              kind: python
              script: {uri: "{{ script_path }}", source: {type: file}}
    """))
    result = load_playbook(path)
    (task,) = result.playbook.step("start").tasks
    assert task.config["code"] == "result = 7\n"


def test_libs_list_entry_that_names_a_package_is_a_warning_and_imports_nothing() -> None:
    result = parse_playbook(playbook_text("""
        workflow:
          - step: start
            tool:
              kind: python
              libs: [json, psycopg2-binary]
              code: "result = 1"
    """), FILE)
    (task,) = result.playbook.step("start").tasks
    assert task.config["libs"] == {"json": "json"}
    assert [str(w) for w in result.warnings] == [
        'test.yaml:9: step "start" field "tool.libs": warning: libs entry "psycopg2-binary" is not '
        "a module name (a package to install?); nothing is imported for it: install packages on "
        "the workers"]
