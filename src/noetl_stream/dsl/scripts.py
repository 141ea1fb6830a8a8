"""`script:`: a task's code or SQL kept in a file beside the playbook (NoETL's script attribute).

NoETL's shape is `script: {uri, source: {type, ...}, encoding}` with `type` one of `file`, `gcs`,
`s3`, `http`; its worker infers the type from the uri's scheme when `type` is absent. The script
takes the place of the kind's inline field: python `code`, SQL `command` / `query`.

This build reads `file` scripts when the playbook is loaded (`run`, `validate`, `register`),
relative to the playbook's own file, and carries their text in the playbook's text itself: the
files follow the playbook as a second YAML document, marked by `FILES_MARKER` and holding one
JSON object `{"noetl_stream_files": {uri as written: text}}`. The server, the catalog and every
worker then see the same self-contained text, and the task's config holds the script's text in
the IR and the commands, so no process but the one that loaded the playbook reads the disk.
Remote sources are registration errors until a build fetches them. Pure but for reading files.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from noetl_stream.dsl.templating import has_template, render_string
from noetl_stream.errors import TemplateError
from noetl_stream.jsonutil import JsonObject, JsonValue

FILES_MARKER = "--- # noetl-stream: the files this playbook's script: fields name, as loaded"
FILES_KEY = "noetl_stream_files"
SOURCE_TYPES = ("file", "inline", "gcs", "s3", "http")
REMOTE_TYPES = frozenset({"gcs", "s3", "http"})
SCRIPT_KEYS = frozenset({"uri", "source", "encoding", "content"})
SOURCE_KEYS = frozenset({"type", "auth", "region", "endpoint", "method", "headers", "timeout",
                         "bucket", "content", "code"})
# The config field a script stands in for, per kind that accepts `script:`.
SCRIPT_FIELD = {"python": "code", "postgres": "command", "duckdb": "command"}
# What a script replaces: its field and the field's other names (NoETL: script wins over them,
# and `code_b64` / `command_b64` win over the plain field).
REPLACED_FIELDS = {"python": ("code", "code_b64"), "postgres": ("command", "query", "command_b64"),
                   "duckdb": ("command", "query", "command_b64")}
B64_FIELD = {"python": "code_b64", "postgres": "command_b64", "duckdb": "command_b64"}
_SCHEMES = (("gs://", "gcs"), ("s3://", "s3"), ("http://", "http"), ("https://", "http"))

Report = Callable[[str, str], None]  # (field under `script`, message)


@dataclass(frozen=True)
class ScriptRef:
    """A parsed `script:` descriptor: a file to read, or (`source.type: inline`) its text."""

    uri: str
    encoding: str = "utf-8"
    content: str | None = None


def parse_script(raw: JsonValue, report: Report,
                 workload: Mapping[str, JsonValue] | None = None) -> ScriptRef | None:
    """Check a `script:` descriptor; a file script comes back, anything else is reported. A
    templated `uri` is rendered with the playbook's `workload` as written (NoETL playbooks keep
    the path in the workload: `uri: "{{ script_path }}"`).
    """
    if not isinstance(raw, Mapping):
        report("script", "script must be a mapping {uri, source: {type}}")
        return None
    for key in raw:
        if key not in SCRIPT_KEYS:
            report(f"script.{key}", f'unknown key "{key}" in script; it takes uri, source, encoding')
    source = _source(raw, report)
    if source is None:
        return None
    if (source.get("type") or ("inline" if "content" in raw else None)) == "inline":
        return _inline(raw, source, report)
    uri = raw.get("uri")
    if not isinstance(uri, str) or not uri.strip():
        report("script.uri", "script needs `uri:` (a path relative to the playbook's file)")
        return None
    if not _file_source(source, uri, report):
        return None
    if has_template(uri) and (uri := _rendered_uri(uri, report, workload)) is None:
        return None
    if _type_of(uri) != "file":
        report("script.uri", f'uri "{uri}" is not a file path, but script.source.type is "file"')
        return None
    encoding = raw.get("encoding") or "utf-8"
    if not isinstance(encoding, str):
        report("script.encoding", "script.encoding must be a text encoding name such as utf-8")
        return None
    return ScriptRef(uri=uri.removeprefix("file://"), encoding=encoding)


def _source(raw: Mapping[str, JsonValue], report: Report) -> Mapping[str, JsonValue] | None:
    """A script's `source:` with its keys checked; None after reporting."""
    source = raw.get("source") or {}
    if not isinstance(source, Mapping):
        report("script.source", "script.source must be a mapping with `type`")
        return None
    for key in (k for k in source if k not in SOURCE_KEYS):
        report(f"script.source.{key}", f'unknown key "{key}" in script.source')
    if "code" in source:  # an inline source was taken as the kind's code (inline_code)
        report("script.source.code", f'script.source.code is the text of an inline source, but '
               f'script.source.type is "{source.get("type")}"; drop one of them')
        return None
    return source


def _file_source(source: Mapping[str, JsonValue], uri: str, report: Report) -> bool:
    """Whether the script's source type is a file (the only kind read here); if not, say why."""
    source_type = source.get("type") or _type_of(uri)
    if source_type not in SOURCE_TYPES:
        report("script.source.type", f'script source type "{source_type}" is not one of '
               f"{', '.join(SOURCE_TYPES)}")
        return False
    if source_type in REMOTE_TYPES:
        report("script.source.type", f'script source "{source_type}" ({uri}) is not supported by '
               "this version of noetl-stream yet; put the file beside the playbook and use "
               "`source: {type: file}`")
        return False
    return True


def _rendered_uri(uri: str, report: Report, workload: Mapping[str, JsonValue] | None) -> str | None:
    """A templated file uri rendered with the playbook's workload; None after reporting."""
    why = "a file script's uri may read only the playbook's own workload (the file is read " \
          "when the playbook is loaded)"
    try:
        rendered = render_string(uri, {"workload": dict(workload or {}), **(workload or {})})
    except TemplateError as exc:
        report("script.uri", f"{why}: {exc}")
        return None
    if not isinstance(rendered, str) or not rendered.strip():
        report("script.uri", f"{why}; {uri!r} gave {rendered!r}")
        return None
    return rendered


def _inline(raw: Mapping[str, JsonValue], source: Mapping[str, JsonValue],
            report: Report) -> ScriptRef | None:
    """`script: {source: {type: inline}, content: TEXT}`: the text is written in the playbook
    (`content` beside `source`, or inside it). NoETL's script sources are remote or files; this
    build also takes the text itself, so a task can switch between a file and inline text by
    changing only `source`.
    """
    content = raw.get("content", source.get("content"))
    if not isinstance(content, str) or not content.strip():
        report("script.content", "an inline script needs its text in `content:`")
        return None
    return ScriptRef(uri=str(raw.get("uri") or "inline"), content=content)


def inline_source(kind: str, config: Mapping[str, JsonValue]) -> Mapping[str, JsonValue] | None:
    """The `source:` of NoETL's `script: {source: {type: inline, code: TEXT}}` (the type may be
    left out), for a kind that takes scripts; None for any other config.
    """
    script = config.get("script")
    source = script.get("source") if isinstance(script, Mapping) else None
    if kind not in SCRIPT_FIELD or not isinstance(source, Mapping) or "code" not in source \
            or (source.get("type") or "inline") != "inline":
        return None
    return source


def inline_code(kind: str, config: JsonObject) -> JsonObject:
    """An inline script's `code` is the kind's inline field written another way
    (inline_source): it is then rendered and run as `code:` is, and a flat `code:` beside it
    wins, as in NoETL's Rust python tool.
    """
    source = inline_source(kind, config)
    if source is None:
        return config
    field = SCRIPT_FIELD[kind]
    out = {k: v for k, v in config.items() if k != "script"}
    if not any(name in out for name in REPLACED_FIELDS[kind]):
        out[field] = source["code"]
    return out


def decode_b64(kind: str, config: JsonObject, report: Report) -> JsonObject:
    """NoETL's `code_b64` / `command_b64`: the code or SQL base64-encoded, taking the place of
    `code` / `command`. A value that is not base64 of UTF-8 text is reported.
    """
    field = B64_FIELD.get(kind)
    if field is None or field not in config:
        return config
    config = dict(config)
    encoded = config.pop(field)
    try:
        text = base64.b64decode(str(encoded), validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError, ValueError):
        report(field, f"{field} must be base64-encoded UTF-8 text")
        return config
    config[SCRIPT_FIELD[kind]] = text
    return config


def _type_of(uri: str) -> str:
    """The source type a uri's scheme implies (NoETL's worker infers it the same way)."""
    for prefix, source_type in _SCHEMES:
        if uri.startswith(prefix):
            return source_type
    return "file"


def read_script(ref: ScriptRef, base_dir: Path | None, attached: Mapping[str, str]) -> str:
    """The script's text: the file beside the playbook when the playbook was read from disk,
    else the copy that travels with the playbook's text. Raises ValueError saying what is wrong.
    """
    if ref.content is not None:
        return ref.content
    if base_dir is not None:
        path = Path(ref.uri) if Path(ref.uri).is_absolute() else base_dir / ref.uri
        if not path.exists() and Path(ref.uri).exists():
            # NoETL resolves script paths against the worker's working directory; here that is
            # the directory `run` / `register` was started in, tried after the playbook's own.
            path = Path(ref.uri)
        try:
            return path.read_bytes().decode(ref.encoding)
        except FileNotFoundError:
            if ref.uri not in attached:
                raise ValueError(f'script file "{ref.uri}" ({path.resolve()}) does not exist') from None
        except (OSError, UnicodeDecodeError, LookupError) as exc:
            raise ValueError(f'script file "{ref.uri}" ({path}) cannot be read: {exc}') from None
    if ref.uri in attached:
        return attached[ref.uri]
    raise ValueError(f'script file "{ref.uri}" did not travel with the playbook: run or register '
                     "the playbook with `noetl-stream run FILE` or `noetl-stream register FILE`, "
                     "which read the files it names")


def split_files(text: str) -> tuple[str, dict[str, str]]:
    """The playbook's own YAML and the files that travel with it (see the module docstring).

    Raises ValueError when the files' document is there but is not the JSON this module writes.
    """
    marker = "\n" + FILES_MARKER + "\n"
    at = text.rfind(marker)
    if at < 0:
        return text, {}
    head, tail = text[:at + 1], text[at + len(marker):]
    try:
        doc = json.loads(tail)
    except ValueError as exc:
        raise ValueError(f"the files attached after the playbook are not valid JSON: {exc}") from None
    files = doc.get(FILES_KEY) if isinstance(doc, dict) else None
    if not isinstance(files, dict) or not all(isinstance(k, str) and isinstance(v, str)
                                              for k, v in files.items()):
        raise ValueError(f'the document attached after the playbook must be {{"{FILES_KEY}": '
                         "{path: text}}")
    return head, files


def attach_files(text: str, files: Mapping[str, str]) -> str:
    """The playbook's text with `files` attached (replacing any files it already carried)."""
    head, _ = split_files(text)
    if not files:
        return head
    if not head.endswith("\n"):
        head += "\n"
    body = json.dumps({FILES_KEY: dict(sorted(files.items()))}, ensure_ascii=False)
    return f"{head}{FILES_MARKER}\n{body}\n"
