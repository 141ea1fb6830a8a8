"""What the DSL knows about a python task's code: the `libs:` it imports and whether it reads
`context`. Pure.

`libs:` is NoETL's mapping `alias: module` (`pd: pandas`, `storage: google.cloud.storage`), or
`alias: {from: package, import: name}`; an alias equal to its module (`os: os`) imports the
module under its own name. NoETL's python engine ignores any other shape with a log line; here it
is a registration error, since code that then fails on a missing name is harder to trace.
"""

from __future__ import annotations

import ast
import keyword
import re
from collections.abc import Callable, Mapping
from functools import lru_cache

from noetl_stream.dsl.templating import has_template
from noetl_stream.jsonutil import JsonValue

_DOTTED = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")
_CONTEXT = "context"

Report = Callable[[str, str], None]  # (field under `libs`, message)


def _identifier(name: str) -> bool:
    return name.isidentifier() and not keyword.iskeyword(name)


def _module_name(value: JsonValue) -> bool:
    return isinstance(value, str) and (has_template(value) or _DOTTED.fullmatch(value) is not None)


def normalize_libs(raw: JsonValue) -> tuple[JsonValue, list[str]]:
    """`libs: [json, os.path]` as the mapping form, each module under its own name, and the list
    entries that are not module names (NoETL's list form also names pip packages such as
    `psycopg2-binary`, which its engines do not act on): those are left out and returned so the
    parser can say so. Anything but a list of texts is returned as it is.
    """
    names = [m for m in raw if isinstance(m, str)] if isinstance(raw, list) else None
    if isinstance(raw, list) and names is not None and len(names) == len(raw):
        return {m: m for m in names if _module_name(m)}, [m for m in names if not _module_name(m)]
    return raw, []


def check_libs(raw: JsonValue, report: Report) -> None:
    """Report every `libs:` entry that is not `alias: module` or `alias: {from, import}`."""
    if not isinstance(raw, Mapping):
        report("libs", "libs must be a mapping alias: module (e.g. `pd: pandas`) or a list of "
               "module names")
        return
    for alias, target in raw.items():
        fld = f"libs.{alias}"
        if isinstance(target, Mapping):
            extra = sorted(set(target) - {"from", "import"})
            if extra or not _module_name(target.get("from")) or not _identifier_or_template(
                    target.get("import")):
                report(fld, f'libs entry "{alias}" must be a module name or {{from: package, '
                       "import: name}")
                continue
        elif not _module_name(target):
            report(fld, f'libs entry "{alias}" names {target!r}, which is not a module name '
                   "(dotted words such as google.cloud.storage)")
            continue
        if not (_identifier(str(alias)) or alias == target):
            report(fld, f'libs alias "{alias}" is not a Python name the code could use')


def _identifier_or_template(value: JsonValue) -> bool:
    return isinstance(value, str) and (has_template(value) or _identifier(value))


@lru_cache(maxsize=1024)
def reads_context(code: str) -> bool:
    """Whether the code reads the name `context` (as a name, or a parameter of a function).

    Code that does not parse as Python (a template not yet rendered) counts as reading it when
    the word appears at all: shipping too much costs bytes, shipping too little breaks the code.
    """
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError):
        return re.search(rf"\b{_CONTEXT}\b", code) is not None
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id == _CONTEXT:
            return True
        if isinstance(node, ast.arg) and node.arg == _CONTEXT:
            return True
    return False
