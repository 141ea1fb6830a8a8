"""Memory of a process tree: RSS and PSS per process, by role, and the peak of their sums.

VmRSS counts every page a process maps, so pages a forked python child shares with its fork
server (the interpreter and the runner, imported once) are counted again for each child. PSS
(`/proc/<pid>/smaps_rollup`) divides each shared page among the processes that map it: its sum
over a tree is what the tree costs the machine, when nothing else maps the same files (other
processes of the same interpreter or nats-server binary take their share of those pages, so on
a shared machine PSS reads a little low). USS, the pages only that process maps, is the floor.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from dataclasses import dataclass, field


def _kb_fields(path: str, names: tuple[str, ...]) -> dict[str, float]:
    found: dict[str, float] = {}
    try:
        with open(path) as f:
            for line in f:
                key, _, rest = line.partition(":")
                if key in names:
                    found[key] = int(rest.split()[0]) / 1024
    except (OSError, ValueError, IndexError):
        pass
    return found


def rss_mb(pid: int) -> float:
    return _kb_fields(f"/proc/{pid}/status", ("VmRSS",)).get("VmRSS", 0.0)


def pss_uss_mb(pid: int) -> tuple[float, float]:
    """Proportional and unique (private) set sizes; another user's need root (the bench's)."""
    found = _kb_fields(f"/proc/{pid}/smaps_rollup", ("Pss", "Private_Clean", "Private_Dirty"))
    return found.get("Pss", 0.0), found.get("Private_Clean", 0.0) + found.get("Private_Dirty", 0.0)


def _argv(pid: int) -> list[str]:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return [a.decode(errors="replace") for a in f.read().split(b"\0") if a]
    except OSError:
        return []


def _parent(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return 0


def role(pid: int) -> str:
    """What a process of the stack is, from its command line (a forked child keeps its fork
    server's, so its parent's tells them apart).
    """
    argv = _argv(pid)
    if not argv:
        return "gone"
    if os.path.basename(argv[0]).startswith("nats-server"):
        return "nats-server"
    if "fork-server" in argv:
        forked = "fork-server" in _argv(_parent(pid))
        return "python child" if forked else "python fork server"
    if "-c" in argv:  # the runner, forked (its parent's argv) or started as an interpreter
        return "python child"
    for word in ("server", "worker"):
        if word in argv[1:]:
            return f"noetl-stream {word}"
    return os.path.basename(argv[0])


@dataclass
class Reading:
    rss_mb: float
    pss_mb: float
    by_role: dict[str, dict[str, float]]  # role -> {count, rss_mb, pss_mb, uss_mb}


def read_tree(pids: list[int]) -> Reading:
    by_role: dict[str, dict[str, float]] = {}
    total_rss = total_pss = 0.0
    for pid in pids:
        rss = rss_mb(pid)
        if not rss:
            continue
        pss, uss = pss_uss_mb(pid)
        total_rss += rss
        total_pss += pss
        part = by_role.setdefault(role(pid), {"count": 0, "rss_mb": 0.0, "pss_mb": 0.0,
                                              "uss_mb": 0.0})
        part["count"] += 1
        part["rss_mb"] += rss
        part["pss_mb"] += pss
        part["uss_mb"] += uss
    rounded = {k: {n: round(v, 1) for n, v in part.items()} for k, part in sorted(by_role.items())}
    return Reading(round(total_rss, 1), round(total_pss, 1), rounded)


@dataclass
class TreeSampler:
    """The peak of the summed RSS and, separately, of the summed PSS of `pids()`, with the
    per-role breakdown at each peak. PSS walks every page table, so it is read less often.
    """

    pids: Callable[[], list[int]]
    every_s: float = 0.25
    peak_rss: Reading | None = None
    peak_pss: Reading | None = None
    _task: asyncio.Task[None] | None = field(default=None, repr=False)

    def sample(self) -> None:
        reading = read_tree(self.pids())
        if self.peak_rss is None or reading.rss_mb > self.peak_rss.rss_mb:
            self.peak_rss = reading
        if self.peak_pss is None or reading.pss_mb > self.peak_pss.pss_mb:
            self.peak_pss = reading

    async def _run(self) -> None:
        while True:
            await asyncio.to_thread(self.sample)
            await asyncio.sleep(self.every_s)

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
        self.sample()


def breakdown(reading: Reading) -> str:
    """One line per role: count, RSS, PSS, USS (its pages no other process maps)."""
    lines = []
    for name, part in reading.by_role.items():
        count = int(part["count"])
        lines.append(f"    {name}{f' x{count}' if count > 1 else ''}: RSS {part['rss_mb']:.0f} MB, "
                     f"PSS {part['pss_mb']:.0f} MB, USS {part.get('uss_mb', 0.0):.0f} MB")
    return "\n".join(lines)
