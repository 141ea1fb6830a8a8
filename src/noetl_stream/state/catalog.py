"""The playbook catalog in KV `noetl_catalog`: texts by content key, the links from a text to the
children it names by file, and catalog paths (`metadata.path`, optionally a version).

Keys:

    pb_<hash>                       a playbook's text (the server stores every request's text here)
    pb_<hash>.links                 JSON {"links": {path as written: child's pb key}} (with its
                                    `schema_version`), for `./child.yaml` paths
    path.<path>.latest              pb key of the last registration of metadata.path <path>
    path.<path>.version.<version>   pb key of that version

A path or version with characters a KV key cannot hold is stored under a hash of it instead.
Texts are immutable under their key, so a later registration never changes what a running
execution resolves, except `latest`, which is meant to move.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any

from nats.js.errors import KeyNotFoundError

from noetl_stream import jsonutil
from noetl_stream.dsl.composition import PlaybookFile, is_file_reference
from noetl_stream.dsl.models import Playbook
from noetl_stream.errors import CatalogError
from noetl_stream.formats import CATALOG_LINKS, UNVERSIONED, VERSION_FIELD

CATALOG_BUCKET = "noetl_catalog"
_PATH_SAFE = re.compile(r"[-/_=A-Za-z0-9]+")
_VERSION_SAFE = re.compile(r"[-_=A-Za-z0-9]+(\.[-_=A-Za-z0-9]+)*")


def _token(text: str, safe: re.Pattern[str]) -> str:
    if safe.fullmatch(text):
        return text
    return "h-" + hashlib.sha256(text.encode()).hexdigest()[:24]


def path_key(path: str, version: str | None = None) -> str:
    """The catalog key that names `path` (its latest registration, or one version)."""
    base = "path." + _token(path.strip("/"), _PATH_SAFE)
    if version is None or str(version) == "latest":
        return base + ".latest"
    return f"{base}.version.{_token(str(version), _VERSION_SAFE)}"


def links_key(key: str) -> str:
    return f"{key}.links"


async def register_files(js: Any, files: list[PlaybookFile]) -> None:
    """Store each file's text under its key, and its links when it names children by file."""
    kv = await js.key_value(CATALOG_BUCKET)
    for f in files:
        await kv.put(f.key, f.text.encode())
        if f.links:
            await kv.put(links_key(f.key), jsonutil.dumps(CATALOG_LINKS.stamp({"links": f.links})))


async def register_path(js: Any, playbook: Playbook, key: str) -> list[str]:
    """Point the playbook's `metadata.path` (latest, and its version if it has one) at `key`."""
    if not playbook.path:
        return []
    kv = await js.key_value(CATALOG_BUCKET)
    names = [path_key(playbook.path)]
    if playbook.version:
        names.append(path_key(playbook.path, playbook.version))
    for name in names:
        await kv.put(name, key.encode())
    return names


def read_links(stored: Any) -> dict[str, str]:
    """The links of a catalog text as stored by any release: version 1 was the mapping itself,
    whose values are keys (text); a versioned entry holds it under `links` (formats.py).
    """
    if not isinstance(stored, dict):
        return {}
    versioned = isinstance(stored.get(VERSION_FIELD), int) and isinstance(stored.get("links"), dict)
    record = CATALOG_LINKS.read(stored if versioned else {**stored, VERSION_FIELD: UNVERSIONED})
    links = record.get("links")
    return {k: v for k, v in links.items() if isinstance(v, str)} if isinstance(links, dict) else {}


async def _get(kv: Any, key: str) -> bytes | None:
    try:
        entry = await kv.get(key)
    except KeyNotFoundError:
        return None
    return bytes(entry.value) if entry.value is not None else None


async def resolve_child(js: Any, *, parent_key: str | None, path: str,
                        version: str | None = None) -> tuple[str, str]:
    """The (text, key) of the playbook a `kind: playbook` task names from the playbook `parent_key`.

    A file path is looked up in the parent's links; anything else is a catalog path.
    """
    kv = await js.key_value(CATALOG_BUCKET)
    if is_file_reference(path):
        raw = await _get(kv, links_key(parent_key)) if parent_key else None
        links = read_links(jsonutil.loads(raw)) if raw else {}
        key = links.get(path)
        if not isinstance(key, str):
            raise CatalogError(
                f'"{path}" names a file, and no file was registered under that name with the '
                "calling playbook; run the parent with `noetl-stream run FILE` or register it "
                "with `noetl-stream register FILE`, which read the files it names")
    else:
        pointer = await _get(kv, path_key(path, version))
        if pointer is None:
            shown = f'"{path}"' + (f' version "{version}"' if version else "")
            raise CatalogError(f"playbook {shown} is not in the catalog; register it with "
                               "`noetl-stream register FILE`")
        key = pointer.decode()
    text = await _get(kv, key)
    if text is None:
        raise CatalogError(f'catalog entry "{key}" for "{path}" is gone')
    return text.decode(), key
