"""A python step under a root worker against the worker's files and the executions after it:
it cannot read the worker's encryption key or a NATS creds file beside it (mode 600 in a
folder open to all), nor install a cron job, and what it leaves (files in `/tmp`, `/dev/shm`,
`/var/tmp`, a daemon of its own session holding a listening socket) is gone before a later
execution's step runs as its uid. A real `noetl-stream worker` process with one python process,
so the later execution gets the same place (docs/security.md, "What a python step can do").
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest
from test_python_sandbox import (  # noqa: F401  (fixtures)
    SECRET_KEY,
    SLOT_UIDS,
    Worker,
    _alive,
    _needs_root_sandbox,
    _serving,
    _url,
    _worker_env,
    nats_bus,
    sandbox_python,
)

from noetl_stream.bus.connection import Bus
from playbook_files import fill, playbook_path

pytestmark = pytest.mark.e2e

CREDS = "-----BEGIN NATS USER JWT-----\nnot-for-steps\n------END NATS USER JWT------\n"


@pytest.mark.timeout(200)
async def test_a_step_reads_no_worker_file_and_leaves_nothing_for_the_next_execution(
        nats_bus: Bus, tmp_path: Path, sandbox_python: Path | None) -> None:  # noqa: F811
    _needs_root_sandbox(sandbox_python)
    # The worker's home in a folder every user may enter: only the files' modes guard them.
    home = Path(tempfile.mkdtemp(prefix="noetl-home-"))
    home.chmod(0o755)
    try:
        for name, text in (("worker.creds", CREDS), ("secret.key", SECRET_KEY + "\n")):
            (home / name).write_text(text)
            (home / name).chmod(0o600)  # as the worker makes its secret.key
        env = {**_worker_env(sandbox_python), "NOETL_STREAM_HOME": str(home)}
        del env["NOETL_STREAM_SECRET_KEY"]  # read from the home's secret.key instead
        worker = Worker(_url(nats_bus), tmp_path / "worker.log", env)
        leave = fill(playbook_path("e2e", "python_sandbox_leave_behind.yaml").read_text(),
                     home=home)
        async with _serving(nats_bus, worker) as run:
            left = await run(leave, "leave.yaml")
            assert left["event_type"] == "execution.completed", left
            seen = left["result"]
            find = fill(playbook_path("e2e", "python_sandbox_find_left.yaml").read_text(),
                        tag=seen["tag"], port=seen["port"], daemon=seen["daemon"])
            found = []
            while len(found) < 8 and seen["uid"] not in {f["result"]["uid"] for f in found}:
                found.append(await run(find, "find.yaml"))  # its uids take turns
    finally:
        for name in ("secret.key", "worker.creds"):
            (home / name).unlink(missing_ok=True)
        home.rmdir()
    assert seen["uid"] in SLOT_UIDS
    assert (seen["key"], seen["creds"]) == ("PermissionError", "PermissionError"), seen
    assert SECRET_KEY not in str(left)
    assert seen["cron"] in ("PermissionError", "FileNotFoundError"), seen
    assert seen["spool"] in ("PermissionError", "FileNotFoundError"), seen
    assert all(f["event_type"] == "execution.completed" for f in found), found
    # One python process: a later execution's child soon runs as the same uid.
    assert seen["uid"] in {f["result"]["uid"] for f in found}, found
    # The next holder of the slot's uid finds none of it. (A step of another uid running
    # meanwhile may, while the leaver's interpreter is kept for its execution's next step:
    # /tmp and the loopback network are shared, docs/security.md.)
    for f in found:
        if f["result"]["uid"] == seen["uid"]:
            assert f["result"] == {**f["result"], "listening": False, "files": [],
                                   "daemon": False}, f["result"]
    assert not _alive(seen["daemon"])
    for folder in ("/tmp", "/dev/shm", "/var/tmp"):
        assert not os.path.exists(os.path.join(folder, seen["tag"]))
