"""Requests a worker sends for the child executions of its commands, and what the server checks
before it takes them.

A `kind: playbook` task starts a child execution and, when its parent stops waiting, cancels it.
A worker publishes those requests on subjects that end with its pool:
`<prefix>.requests.execute.<pool>` and `<prefix>.requests.cancel.<pool>`. Each pool's NATS user
may publish only its own pool's two subjects, never the plain ones a client uses
(deploy/nats/accounts), and the server takes such a request only for work of that pool:

- a start must name its parent's step run (`parent_execution_id`, `parent_step_run_id`), and
  that run's step must run on the pool the subject names;
- a cancel must name a child execution whose parent has a step on that pool.

So a worker of one pool can neither cancel an execution of another (a top-level one, or another
pool's child) nor start executions of its own choosing on another pool, even with its own NATS
credentials; on a NATS without users the server's check still holds for a worker that keeps to
its own subjects.
"""

from __future__ import annotations

from nats.aio.msg import Msg
from nats.js.errors import KeyNotFoundError, NotFoundError

from noetl_stream import jsonutil
from noetl_stream.bus.connection import Bus
from noetl_stream.dsl.models import Playbook
from noetl_stream.errors import PlaybookError
from noetl_stream.messages import ExecutionRequest, Malformed, validated
from noetl_stream.router.state import ExecutionState
from noetl_stream.server.playbook_parsing import PLAYBOOK_CACHE_SIZE, parse_off_loop
from noetl_stream.subjects import DEFAULT_POOL
from noetl_stream.tools.registry import installed_kinds

_PLAYBOOKS: dict[str, Playbook] = {}  # catalog key -> parsed, the latest PLAYBOOK_CACHE_SIZE


def pool_of(subject: str, base: str) -> str | None:
    """The pool a worker's request names (`<base>.<pool>`); None for the plain `base`."""
    return subject[len(base) + 1:] if subject.startswith(base + ".") else None


def is_cancel(subject: str, cancel_subject: str) -> bool:
    """A client's cancel or a worker's (`<cancel_subject>.<pool>`)."""
    return subject == cancel_subject or pool_of(subject, cancel_subject) is not None


def _refused(reason: str, msg: Msg) -> Malformed:
    try:
        raw: object = jsonutil.loads(msg.data)
    except ValueError:
        raw = None
    return Malformed("refused", reason, raw)


async def checked_start(bus: Bus, msg: Msg) -> ExecutionRequest:
    """The request on `msg`, validated; a worker's (on a pool's subject) only for a step run of
    that pool, else it is refused as Malformed("refused", ...), answered like a bad request.
    """
    request = validated(ExecutionRequest, msg.data)
    pool = pool_of(msg.subject, bus.topology.execute_request_subject())
    if pool is None:
        return request
    parent, run_id = request.parent_execution_id, request.parent_step_run_id
    if parent is None or run_id is None:
        raise _refused(f"a worker of pool {pool!r} may start only a child of one of its "
                       "commands: the request names no parent step run", msg)
    state = await _state(bus, parent)
    run = state.runs.get(run_id) if state is not None else None
    if state is None or run is None:
        raise _refused(f"a worker of pool {pool!r} may start only a child of one of its "
                       f"commands: execution {parent} has no step run {run_id}", msg)
    step_pool = await _step_pool(bus, state, run.step)
    if step_pool != pool:
        raise _refused(f"a worker of pool {pool!r} may not start a child for step {run.step!r} "
                       f"of execution {parent}: that step runs on pool {step_pool!r}", msg)
    return request


async def cancel_refusal(bus: Bus, msg: Msg, target: ExecutionState) -> str | None:
    """Why a worker's cancel (on a pool's subject) may not cancel `target`; None when it may,
    or when the cancel is a client's.
    """
    pool = pool_of(msg.subject, bus.topology.cancel_request_subject())
    if pool is None:
        return None
    parent = target.parent_execution_id
    state = await _state(bus, parent) if parent is not None else None
    if state is None:
        return (f"a worker of pool {pool!r} may cancel only a child execution of its commands: "
                f"execution {target.execution_id} is no child")
    playbook = await _playbook(bus, state.playbook_key)
    if playbook is None or not any((s.pool or DEFAULT_POOL) == pool for s in playbook.steps):
        return (f"a worker of pool {pool!r} may cancel only a child execution of its commands: "
                f"the parent {parent} of execution {target.execution_id} has no step on that pool")
    return None


async def _state(bus: Bus, execution_id: str) -> ExecutionState | None:
    try:
        msg = await bus.js.get_msg("KV_noetl_executions",
                                   subject=f"$KV.noetl_executions.{execution_id}")
    except NotFoundError:  # no such parent: refused as one of another pool would be
        return None
    if not msg.data:
        return None
    return ExecutionState.from_dict(jsonutil.loads(msg.data))


async def _step_pool(bus: Bus, state: ExecutionState, step: str) -> str | None:
    playbook = await _playbook(bus, state.playbook_key)
    try:
        return (playbook.step(step).pool or DEFAULT_POOL) if playbook is not None else None
    except KeyError:
        return None


async def _playbook(bus: Bus, key: str) -> Playbook | None:
    playbook = _PLAYBOOKS.get(key)
    if playbook is None:
        try:
            entry = await (await bus.js.key_value("noetl_catalog")).get(key)
            playbook = await parse_off_loop(bytes(entry.value or b"").decode(), key,
                                            installed_kinds())
        except (KeyNotFoundError, PlaybookError):
            return None
        _PLAYBOOKS[key] = playbook
        while len(_PLAYBOOKS) > PLAYBOOK_CACHE_SIZE:
            del _PLAYBOOKS[next(iter(_PLAYBOOKS))]
    return playbook
