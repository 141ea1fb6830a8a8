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
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from nats.js import JetStreamContext
from nats.js.errors import KeyNotFoundError
from nats.js.kv import KeyValue

from noetl_stream import ids, jsonutil
from noetl_stream.dsl.composition import PlaybookFile, is_file_reference, may_be_catalog_path
from noetl_stream.dsl.models import Playbook
from noetl_stream.dsl.subscription import Subscription
from noetl_stream.errors import CatalogError
from noetl_stream.formats import CATALOG_LINKS, UNVERSIONED, VERSION_FIELD
from noetl_stream.jsonutil import JsonValue
from noetl_stream.state.kv_keys import bucket_keys
from noetl_stream.state.records import Skips, read_each

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


async def register_files(js: JetStreamContext, files: list[PlaybookFile]) -> None:
    """Store each file's text under its key, and its links when it names children by file."""
    kv = await js.key_value(CATALOG_BUCKET)
    for f in files:
        await kv.put(f.key, f.text.encode())
        if f.links:
            await kv.put(links_key(f.key), jsonutil.dumps(CATALOG_LINKS.stamp({"links": {**f.links}})))


async def register_path(js: JetStreamContext, playbook: Playbook, key: str) -> list[str]:
    """Point the playbook's `metadata.path` (latest, and its version if it has one) at `key`."""
    return await point_path(js, playbook.path, playbook.version, key)


async def point_path(js: JetStreamContext, path: str | None, version: str | None, key: str) -> list[str]:
    """Point a catalog document's `metadata.path` (latest, and `version` if set) at `key`."""
    if not path:
        return []
    kv = await js.key_value(CATALOG_BUCKET)
    names = [path_key(path)]
    if version:
        names.append(path_key(path, version))
    for name in names:
        await kv.put(name, key.encode())
    return names


async def register_subscription(js: JetStreamContext, text: str, subscription: Subscription) -> str:
    """Store a `kind: Subscription` document's text and point its path at it; its key."""
    key = ids.playbook_key(text)
    kv = await js.key_value(CATALOG_BUCKET)
    await kv.put(key, text.encode())
    await point_path(js, subscription.path, subscription.version, key)
    return key


def read_links(stored: JsonValue) -> dict[str, str]:
    """The links of a catalog text as stored by any release: version 1 was the mapping itself,
    whose values are keys (text); a versioned entry holds it under `links` (formats.py).
    """
    if not isinstance(stored, dict):
        return {}
    versioned = isinstance(stored.get(VERSION_FIELD), int) and isinstance(stored.get("links"), dict)
    record = CATALOG_LINKS.read(stored if versioned else {**stored, VERSION_FIELD: UNVERSIONED})
    links = record.get("links")
    return {k: v for k, v in links.items() if isinstance(v, str)} if isinstance(links, dict) else {}


async def _get(kv: KeyValue, key: str) -> bytes | None:
    try:
        entry = await kv.get(key)
    except KeyNotFoundError:
        return None
    return bytes(entry.value) if entry.value is not None else None


async def resolve_child(js: JetStreamContext, *, parent_key: str | None, path: str,
                        version: str | None = None) -> tuple[str, str]:
    """The (text, key) of the playbook a `kind: playbook` task names from the playbook `parent_key`.

    A file path is looked up in the parent's links; anything else is a catalog path, and so is
    `/x/y` when no file of that name was registered with the parent.
    """
    kv = await js.key_value(CATALOG_BUCKET)
    links: dict[str, str] = {}
    if is_file_reference(path):
        raw = await _get(kv, links_key(parent_key)) if parent_key else None
        links = read_links(jsonutil.loads(raw)) if raw else {}
    if is_file_reference(path) and (path in links or not may_be_catalog_path(path)):
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


@dataclass
class CatalogPath:
    """One catalog path: the playbook id its `latest` names and each version's."""

    path: str
    latest: str | None = None
    versions: dict[str, str] = field(default_factory=dict)


# (path, version) a stored text declares, for keys that hold a hash instead of its names.
Describe = Callable[[str], Awaitable[tuple[str | None, str | None]]]


def split_path_key(key: str) -> tuple[str, str] | None:
    """`path.<p>.latest` -> (<p>, "latest"); `path.<p>.version.<v>` -> (<p>, <v>)."""
    rest = key.removeprefix("path.")
    if rest.endswith(".latest") and "." not in rest[:-7]:
        return rest[:-7], "latest"
    token, sep, version = rest.partition(".version.")
    return (token, version) if sep and "." not in token else None


async def read_entry(js: JetStreamContext, key: str) -> str | None:
    """The text stored under `key`, or None."""
    raw = await _get(await js.key_value(CATALOG_BUCKET), key)
    return raw.decode() if raw else None


async def list_paths(js: JetStreamContext, describe: Describe,
                     skips: Skips | None = None) -> list[CatalogPath]:
    """Every catalog path with its latest and versioned playbook ids, sorted by path; an entry
    that does not decode is left out and named in `skips`.
    """
    kv = await js.key_value(CATALOG_BUCKET)

    async def entry(key: str) -> tuple[str, str, str] | None:
        split, raw = split_path_key(key), await _get(kv, key)
        if split is None or not raw:
            return None
        pointer = raw.decode()
        path, version = split
        if path.startswith("h-") or version.startswith("h-"):
            # Hashed in the key (characters a key cannot hold): the playbook says its real names.
            real_path, real_version = await describe(pointer)
            if real_path:
                path = real_path
                version = version if version == "latest" else real_version or version
        return path, version, pointer

    found: dict[str, CatalogPath] = {}
    for path, version, pointer in await read_each(
            await bucket_keys(js, CATALOG_BUCKET, "path.>"), entry,
            skips if skips is not None else Skips("catalog entry")):
        listed = found.setdefault(path, CatalogPath(path))
        if version == "latest":
            listed.latest = pointer
        else:
            listed.versions[version] = pointer
    return [found[p] for p in sorted(found)]


async def read_path(js: JetStreamContext, path: str, version: str | None = None) -> tuple[str, str] | None:
    """The (text, playbook id) a catalog path (latest, or one version) names, or None."""
    pointer = await read_entry(js, path_key(path, version))
    text = await read_entry(js, pointer) if pointer else None
    return (text, pointer) if pointer and text is not None else None
