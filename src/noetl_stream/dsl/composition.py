"""Playbooks that start playbooks named by file: load a playbook with every child its
`kind: playbook` tasks name by a relative file path (`./child.yaml`), resolved against the file
that names it, recursively.

Each file comes back with its catalog key (a hash of its text) and its links: the path as written
-> the child's key; its text carries the files its `script:` fields name (dsl/scripts.py).
Registering these in the catalog lets a worker anywhere resolve `./child.yaml`
to the same text the author had on disk. A child that cannot be read or does not validate is an
error of the parent task's `path` field, followed by the child's own issues (with its file:line).
Pure but for reading files.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path

from noetl_stream import ids
from noetl_stream.dsl import scripts
from noetl_stream.dsl.kinds import RUNNABLE_KINDS
from noetl_stream.dsl.models import Playbook
from noetl_stream.dsl.parser import ParseResult, load_playbook
from noetl_stream.errors import Issue, PlaybookError

MAX_DEPTH = 16


def is_file_reference(path: str) -> bool:
    """`./x.yaml`, `../x.yaml`, `/abs/x.yaml` or `x.yaml` name a file; anything else a catalog path."""
    return path.startswith(("./", "../", "/")) or path.endswith((".yaml", ".yml"))


def may_be_catalog_path(path: str) -> bool:
    """`/x/y` without a `.yaml` suffix names a file when one is there, else NoETL's catalog path
    of that spelling (its catalog keeps `metadata.path` as written, leading `/` and all).
    """
    return path.startswith("/") and not path.endswith((".yaml", ".yml"))


@dataclass(frozen=True)
class PlaybookFile:
    """One playbook read from disk, with the children it names by file."""

    file: str
    text: str
    key: str
    playbook: Playbook
    links: dict[str, str] = field(default_factory=dict)  # path as written -> child's catalog key


@dataclass
class ComposedResult(ParseResult):
    """A parse result plus every file involved: the playbook itself first, then its children."""

    files: list[PlaybookFile] = field(default_factory=list)


def file_references(playbook: Playbook) -> list[tuple[str, str, int | None, str]]:
    """(step, task, line, path) of every `kind: playbook` task whose `path` names a file."""
    out = []
    for step in playbook.steps:
        for task in step.tasks:
            path = task.config.get("path")
            if (task.kind == "playbook" and isinstance(path, str) and "{{" not in path
                    and "{%" not in path and is_file_reference(path)):
                out.append((step.name, task.name, task.line, path))
    return out


def load_with_children(path: str | Path, *, kinds: Collection[str] = RUNNABLE_KINDS,
                       strict: bool = False) -> ComposedResult:
    """Load and validate `path` and every child it names by file; raise PlaybookError once with
    every issue found in any of them.
    """
    loader = _Loader(kinds, strict)
    root = load_playbook(path, kinds=kinds, strict=strict)
    loader.add(Path(path), root, 0)
    if loader.issues:
        raise PlaybookError(loader.issues)
    files = [loader.files[p] for p in loader.order]
    return ComposedResult(root.playbook, root.warnings + loader.warnings, root.scripts, files)


class _Loader:
    def __init__(self, kinds: Collection[str], strict: bool) -> None:
        self.kinds = kinds
        self.strict = strict
        self.files: dict[Path, PlaybookFile] = {}
        self.order: list[Path] = []
        self.issues: list[Issue] = []
        self.warnings: list[Issue] = []

    def add(self, path: Path, parsed: ParseResult, depth: int) -> str:
        resolved = path.resolve()
        # The script files it names travel inside its text, so the key covers them too.
        text = scripts.attach_files(path.read_text(), parsed.scripts)
        key = ids.playbook_key(text)
        links: dict[str, str] = {}
        entry = PlaybookFile(str(path), text, key, parsed.playbook, links)
        self.files[resolved] = entry
        self.order.append(resolved)
        for step, _task, line, ref in file_references(parsed.playbook):
            child_key = self.child(path, ref, step, line, depth)
            if child_key is not None:
                links[ref] = child_key
        return key

    def child(self, parent: Path, ref: str, step: str, line: int | None, depth: int) -> str | None:
        target = _child_file((parent.parent / ref) if not ref.startswith("/") else Path(ref))
        if may_be_catalog_path(ref) and not target.exists():
            return None  # no such file: a catalog path, resolved when the task runs
        known = self.files.get(target.resolve())
        if known is not None:  # already loaded, or a cycle back to a file being loaded
            return known.key
        file = str(parent)
        if depth >= MAX_DEPTH:
            self.issues.append(Issue(file, line, f'child playbook "{ref}" nests more than '
                                     f"{MAX_DEPTH} files deep", step, "tool.path"))
            return None
        try:
            parsed = load_playbook(target, kinds=self.kinds, strict=self.strict)
        except PlaybookError as exc:
            unreadable = len(exc.issues) == 1 and exc.issues[0].message.startswith("cannot read")
            if unreadable:
                detail = exc.issues[0].message.removeprefix("cannot read the file: ")
                self.issues.append(Issue(file, line, f'child playbook "{ref}" ({target}) cannot '
                                         f"be read: {detail}", step, "tool.path"))
                return None
            errors = sum(1 for i in exc.issues if i.severity == "error")
            self.issues.append(Issue(file, line, f'child playbook "{ref}" is invalid '
                                     f"({errors} error{'s' if errors != 1 else ''} below)", step,
                                     "tool.path"))
            self.issues.extend(exc.issues)
            return None
        self.warnings.extend(parsed.warnings)
        return self.add(target, parsed, depth + 1)


def _child_file(target: Path) -> Path:
    """`./child` names `child`, else `child.yaml`, else `child.yml` beside the parent: NoETL's
    CLI joins the path to the parent's folder and its Python loader adds `.yaml`.
    """
    if target.exists() or target.suffix in (".yaml", ".yml"):
        return target
    for suffix in (".yaml", ".yml"):
        candidate = target.with_name(target.name + suffix)
        if candidate.exists():
            return candidate
    return target
