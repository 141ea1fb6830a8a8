"""A credential scoped to a catalog path serves only the texts registered under that path.

A playbook of someone else that writes `metadata.path: reports/daily` (a path the catalog
registers with other text) to borrow what `reports/daily` may use is refused, with its use
recorded as not granted; the registered text, and an older registered version of it, are
served; a path nobody registered is still taken as claimed (a playbook run from its file).
"""

from __future__ import annotations

import pytest

from noetl_stream import config, ids, jsonutil
from noetl_stream.bus.connection import Bus
from noetl_stream.credentials import CredentialScope
from noetl_stream.dsl.composition import PlaybookFile
from noetl_stream.dsl.parser import parse_playbook
from noetl_stream.services import run_services, submit_and_watch
from noetl_stream.state.catalog import register_files, register_path
from noetl_stream.state.credentials import CredentialStore
from noetl_stream.state.crypto import SecretBox
from noetl_stream.testing.events import stored_messages
from playbook_files import fill, read_playbook

pytestmark = pytest.mark.integration

SCOPED = read_playbook("integration", "nats_accounts_scoped.yaml")


def _text(path: str, *, version: str | None = None, marker: str = "") -> str:
    text = fill(SCOPED, name=path.replace("/", "_"), path=path)
    if version is not None:
        text = text.replace(f"  path: {path}\n", f"  path: {path}\n  version: \"{version}\"\n")
    return text + (f"# {marker}\n" if marker else "")


async def _register(bus: Bus, text: str) -> None:
    key = ids.playbook_key(text)
    playbook = parse_playbook(text).playbook
    await register_files(bus.js, [PlaybookFile("p.yaml", text, key, playbook)])
    await register_path(bus.js, playbook, key)


async def test_a_scoped_credential_serves_only_the_texts_registered_under_its_path(
        bus: Bus) -> None:
    store = await CredentialStore.open(bus.js, SecretBox.from_env(config.home_dir()))
    await store.set("prod_db", "basic", {"username": "etl", "password": "pw"},
                    scope=CredentialScope(playbooks=["reports/*"]))
    older = _text("reports/daily", version="1")
    await _register(bus, older)
    latest = _text("reports/daily", version="2")
    await _register(bus, latest)
    runs = {
        "latest": latest,
        "older": older,
        # Someone else's text under the registered path: without a version, with the older
        # registration's version, and with a version nobody registered.
        "forged": _text("reports/daily", marker="someone else's"),
        "forged-v1": _text("reports/daily", version="1", marker="someone else's"),
        "forged-v9": _text("reports/daily", version="9", marker="someone else's"),
        # A path nobody registered: the claim stands, as for a playbook run from its file.
        "unregistered": _text("reports/weekly"),
    }
    finals = {}
    async with run_services(bus, python_children=1):
        for name, text in runs.items():
            finals[name] = await submit_and_watch(
                bus, playbook_text=text, playbook_file=f"{name}.yaml", payload={},
                on_event=lambda _: None, timeout_s=60)

    for name in ("latest", "older", "unregistered"):
        assert finals[name]["event_type"] == "execution.completed", (name, finals[name])
        assert finals[name]["result"] == {"user": "etl"}
    for name in ("forged", "forged-v1", "forged-v9"):
        final = finals[name]
        assert final["event_type"] == "execution.failed", (name, final)
        assert 'claims the catalog path \\"reports/daily\\"' in jsonutil.dumps(final).decode()
        assert "etl" not in jsonutil.dumps(final).decode()
        stored = await stored_messages(
            bus.js, f"noetl.events.{final['execution_id']}.credential.used")
        assert [jsonutil.loads(data)["granted"] for _, data in stored] == [False]
