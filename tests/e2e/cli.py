"""Running the `noetl-stream` console script as a subprocess, the way a user does."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

CLI = Path(sys.executable).with_name("noetl-stream")
PLAYBOOKS = Path(__file__).with_name("playbooks")


@dataclass(frozen=True)
class CliResult:
    returncode: int
    stdout: str
    stderr: str

    @property
    def summary(self) -> dict[str, Any]:
        """The one JSON object `run --json` prints on stdout."""
        value = json.loads(self.stdout)
        assert isinstance(value, dict), self.stdout
        return value


async def run_cli(*args: str, timeout_s: float = 60.0, env: dict[str, str] | None = None,
                  cwd: Path | None = None) -> CliResult:
    """Run the CLI without blocking the event loop (tests serve HTTP from the same loop)."""
    proc = await asyncio.create_subprocess_exec(
        str(CLI), *args, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        stdin=asyncio.subprocess.DEVNULL, env={**os.environ, **(env or {})}, cwd=cwd)
    try:
        out, err = await asyncio.wait_for(proc.communicate(), timeout_s)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise
    assert proc.returncode is not None
    return CliResult(proc.returncode, out.decode(), err.decode())


async def run_playbook(name: str, *args: str, timeout_s: float = 60.0) -> CliResult:
    return await run_cli("run", str(PLAYBOOKS / name), "--json", "--quiet", *args, timeout_s=timeout_s)
