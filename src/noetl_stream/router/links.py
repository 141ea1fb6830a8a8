"""Links between an execution and the executions replayed from it (`noetl-stream replay`). Pure.

The replay is a new execution whose start names its original (`replay_of`, router/replay.py);
the original hears of it through `execution.replayed` in its own log, applied whatever its status,
and keeps the new execution's id in `replays`, so each side names the other in its state.
"""

from __future__ import annotations

from noetl_stream.events import Replayed
from noetl_stream.router.interface import Router

REPLAYED = "execution.replayed"
MAX_LINKS = 1000  # replays a state names; past it the log still holds every one


def note_replay(router: Router, event: Replayed) -> None:
    replay = event.replay_execution_id
    replays = router.state.replays
    if replay and replay not in replays and len(replays) < MAX_LINKS:
        replays.append(replay)
