"""The Petri-net engine. PURE: no asyncio, nats, aiohttp, time or random imports (a test checks).

`start(...)` and `apply(...)` take the state and an event and return the state and the messages it
implies (the outbox); the runtime shell commits the state, then publishes the outbox.
"""

from noetl_stream.router.engine import abort, apply, foreign_pool, start
from noetl_stream.router.failures import cause_of
from noetl_stream.router.replay import start_replay
from noetl_stream.router.state import Decision, ExecutionState, Outgoing

__all__ = ["Decision", "ExecutionState", "Outgoing", "abort", "apply", "cause_of", "foreign_pool",
           "start", "start_replay"]
