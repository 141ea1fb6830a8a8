"""Keeping an execution's state within one NATS message: its largest values go to the object
store, as large step results already do (state/results.py, spec 002 §10).

Each result a worker reports fits the payload limit on its own, but a loop gathers them: forty
iterations of 240 kB are more than the 8 MiB a KV value may be. When a state would be too large
to commit, the server moves its largest values (results of finished steps and of iterations,
ctx values, loop iteration results not yet stored by page, and the same values in the messages
it is about to publish) to `noetl_results` and
keeps references in their place, largest first, until the state takes half the limit (so it is
not done again at the next event). Readers resolve references wherever they sit: a worker in
the context of its command, `run` in the final result.
"""

from __future__ import annotations

from collections.abc import Iterator, MutableMapping
from dataclasses import dataclass

from noetl_stream import jsonutil, refs
from noetl_stream.jsonutil import JsonValue
from noetl_stream.messages import Command
from noetl_stream.router.state import ExecutionState
from noetl_stream.state.results import ResultStore

SMALLEST_MOVED = 4096  # bytes: smaller values stay inline, a reference is not much smaller


@dataclass
class _Slot:
    """A key of a mapping that holds a playbook's value."""

    holder: MutableMapping[str, JsonValue]
    key: str

    def read(self) -> JsonValue:
        return self.holder[self.key]

    def write(self, value: JsonValue) -> None:
        self.holder[self.key] = value


def _entries(mapping: object) -> Iterator[_Slot]:
    if isinstance(mapping, MutableMapping):
        yield from (_Slot(mapping, key) for key in list(mapping))


def _slots(state: ExecutionState) -> Iterator[_Slot]:
    """Every place of the state that holds a value a playbook produced."""
    # Step results and the execution's are not part of the committed state any more, but for
    # small ones, each smaller than SMALLEST_MOVED (state/step_results.py); a loop's latest
    # iteration results still are.
    yield from _entries(state.ctx)
    for run in state.runs.values():
        if run.loop is not None:
            yield from _entries(run.loop.results)
    for message in state.outbox:
        if isinstance(message.body, Command):
            context = message.body.context
            for scope in (context.steps, context.ctx, context.workload):
                yield from _entries(scope)
        elif message.kind == "event":
            body = message.plain_body
            if "result" in body:
                yield _Slot(body, "result")
            yield from _entries(body.get("ctx"))
            steps = body.get("steps")
            if isinstance(steps, dict):
                yield from (_Slot(step, "result") for step in steps.values()
                            if isinstance(step, dict) and "result" in step)


def _size(value: JsonValue) -> int:
    if value is None or isinstance(value, (bool, int, float)) or refs.ref_of(value) is not None:
        return 0
    try:
        return len(jsonutil.dumps(value))
    except (TypeError, ValueError):
        return 0  # a value JSON cannot hold: the commit's own check reports it


async def shrink(state: ExecutionState, store: ResultStore, size: int, target: int) -> bool:
    """Move the state's largest values to the object store until its JSON (`size` bytes now)
    would take at most `target` bytes; whether anything moved.
    """
    sized = sorted(((_size(slot.read()), n, slot) for n, slot in enumerate(_slots(state))),
                   key=lambda t: (-t[0], t[1]))
    moved = False
    for value_size, _, slot in sized:
        if size <= target or value_size < SMALLEST_MOVED:
            break
        ref = await store.put_bytes(jsonutil.dumps(slot.read()))
        slot.write(ref)
        size -= value_size - len(jsonutil.dumps(ref))
        moved = True
    return moved
