"""What `status` adds to a running execution's report from the streams, beside its state: the
events of the execution that wait in `NOETL_ROUTER` (not yet applied, or applied but
not yet committed and published), and the commands in flight that
`NOETL_COMMANDS` does not hold.

The committed state says what the router waits for; it cannot say that what it waits for has
already come and cannot be committed, or that a command it committed was never stored. Both
happen when NATS stops taking writes: a store that reached its bound, or a nats-server whose
disk filled up. A nats-server that hit "no space left on device" keeps refusing writes to that
stream, without an answer, until it is restarted, even once space is back. Then the state stays
as it was and says "waits for the outcome" while the outcome waits in `NOETL_ROUTER`, or while
the command was never published. These two facts are read here, so `status` says so.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from nats.js.errors import NotFoundError

from noetl_stream import ids
from noetl_stream.bus.jetstream_health import jetstream_trouble
from noetl_stream.errors import InfrastructureError

if TYPE_CHECKING:
    from noetl_stream.bus.connection import Bus

COMMANDS_STREAM = "NOETL_COMMANDS"


async def add_unapplied_writes(bus: Bus, report: dict[str, Any], now: float) -> None:
    """Add `unapplied_events` (count, oldest's type and time) and each command run's
    `command_stored` to a running execution's report.
    """
    if report.get("status") != "running":
        return
    execution_id = str(report["execution_id"])
    router = bus.topology.router_decl()
    subject = f"{router.subject_prefix}.*.{execution_id}.>"
    info = await bus.js.stream_info(router.stream, subjects_filter=subject)
    count = sum((info.state.subjects or {}).values())
    if count:
        oldest = await bus.js.get_msg(router.stream, seq=1, subject=subject, next=True)
        stored_at = oldest.time.timestamp() if oldest.time else None
        # noetl.router.<partition>.<execution>.<event type...>
        event_type = ".".join(str(oldest.subject or "").split(".")[4:])
        report["unapplied_events"] = {
            "count": count, "oldest_type": event_type, "oldest_stored_at": stored_at,
            "waiting_s": round(now - stored_at, 3) if stored_at else None}
    report["held_writes"] = await _held_writes(bus, execution_id)
    runs = [r for r in report.get("running", []) if "pool" in r and "iterations" not in r]
    stored = await _stored_command_ids(bus, {str(r["pool"]) for r in runs})
    for run in runs:
        run["command_stored"] = ids.command_msg_id(str(run["step_run_id"]), None) in stored


async def _held_writes(bus: Bus, execution_id: str) -> list[dict[str, Any]]:
    """The writes of this execution a live process keeps making (its heartbeat lists them,
    bus/storage.py `HELD`): an outcome a worker computed and JetStream does not take.
    """
    from noetl_stream.bus.heartbeats import live_processes

    held = []
    for process in await live_processes(bus):
        writes = process.get("held_writes")
        for write in writes if isinstance(writes, list) else []:
            if isinstance(write, dict) and write.get("execution_id") == execution_id:
                held.append({**write, "role": process.get("role"), "pool": process.get("pool"),
                             "instance": process.get("instance")})
    return held


def held_lines(report: dict[str, Any], when: Any) -> list[str]:
    """Lines for the terminal about writes of this execution a process keeps making."""
    return [f"  {h['role']} {h['instance']} (pool {h['pool']!r}) holds {h['what']} since "
            f"{when(h['since'])} and cannot store it: {h['reason']}; it writes it again until "
            "NOETL_STREAM_STORAGE_RETRY_S has passed, then fails the step with kind storage"
            for h in report.get("held_writes") or []]


async def explain_timeout(bus: Bus, exc: Exception) -> None:
    """Raise what JetStream's silence means when a read of `status` went unanswered (a
    nats-server that disabled JetStream on a full disk answers no request), else return.
    """
    trouble = await jetstream_trouble(bus.nc)
    if trouble is not None:
        raise InfrastructureError(f"{exc or type(exc).__name__}: {trouble}") from None


async def _stored_command_ids(bus: Bus, pools: set[str]) -> set[str]:
    """The msg ids of the commands `NOETL_COMMANDS` holds for `pools` (a work queue: a command
    leaves it when a worker acknowledges it, after its outcome is stored).
    """
    found: set[str] = set()
    for pool in sorted(pools):
        subject, seq = bus.topology.command_filter(pool), 1
        while True:
            try:
                msg = await bus.js.get_msg(COMMANDS_STREAM, seq=seq, subject=subject, next=True)
            except NotFoundError:
                break
            found.add(str((msg.headers or {}).get("Nats-Msg-Id", "")))
            seq = int(msg.seq or seq) + 1
    return found


def unapplied_lines(report: dict[str, Any], when: Any) -> list[str]:
    """Lines for the terminal about events waiting in `NOETL_ROUTER` (`when` formats a time)."""
    pending = report.get("unapplied_events")
    if not pending:
        return []
    plural = "" if pending["count"] == 1 else "s"
    age = f" ({pending['waiting_s']:g}s)" if pending.get("waiting_s") is not None else ""
    return [f"  {pending['count']} event{plural} of this execution wait{'s' if not plural else ''} in "
            f"NOETL_ROUTER, the oldest ({pending['oldest_type']}) since "
            f"{when(pending['oldest_stored_at'])}{age}: no server has finished with "
            f"{'it' if not plural else 'them'} (committed the state and published what follows). "
            "If this lasts, no server runs, or NATS refuses the server's writes (see its log: a "
            "full store waits for room; a nats-server whose disk filled up writes again only "
            "once it is restarted)"]


def command_lines(run: dict[str, Any], report: dict[str, Any]) -> list[str]:
    """A line when a running step's command is not in `NOETL_COMMANDS`."""
    if run.get("command_stored", True):
        return []
    if report.get("unapplied_events"):
        return [f"    its command is not in {COMMANDS_STREAM}: its outcome may be among the "
                "events waiting in NOETL_ROUTER, or the server could not store the command"]
    return [f"    its command is not in {COMMANDS_STREAM} and no outcome of it waits to be "
            "applied: the server committed it and could not store it (see the server's log: a "
            "full store, or a nats-server whose disk filled up, which writes again only once it "
            "is restarted), or it was removed"]
